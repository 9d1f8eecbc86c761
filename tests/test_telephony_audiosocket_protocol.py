"""Asterisk AudioSocket: the pure parser, byte by byte, and the serve flag."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from voice_pipeline.telephony.audiosocket import (
    AudioReceived,
    AudioSocketError,
    AudioSocketParser,
    CallIdentified,
    DtmfReceived,
    ErrorReceived,
    HungUp,
    Kind,
    frame,
)

CALL = uuid.UUID("0123456789abcdef0123456789abcdef")


def test_a_call_fed_one_byte_at_a_time() -> None:
    stream = (
        frame(Kind.UUID, CALL.bytes)
        + frame(Kind.SLIN, b"\x01\x00" * 160)
        + frame(0x12, b"\x00\x00" * 320)
        + frame(Kind.DTMF, b"7")
        + frame(Kind.ERROR, b"\x02")
        + frame(Kind.HANGUP)
    )
    parser = AudioSocketParser()
    events = [e for i in range(len(stream)) for e in parser.feed(stream[i : i + 1])]
    assert events == [
        CallIdentified(CALL),
        AudioReceived(b"\x01\x00" * 160, 8000),
        AudioReceived(b"\x00\x00" * 320, 16000),
        DtmfReceived("7"),
        ErrorReceived(2),
        HungUp(),
    ]
    assert parser.pending == 0


@pytest.mark.parametrize(
    "stream",
    [
        b"\x01" + (400).to_bytes(2, "big"),  # a UUID that says 400 bytes
        frame(Kind.SLIN, b"\x00" * 320),  # audio before the UUID
        frame(Kind.UUID, CALL.bytes) + b"\x10" + (60000).to_bytes(2, "big"),  # oversized audio
        frame(Kind.UUID, CALL.bytes) + frame(Kind.SLIN, b"\x00" * 3),  # odd audio
        frame(Kind.UUID, CALL.bytes) + frame(Kind.DTMF, b"12"),
        frame(Kind.UUID, CALL.bytes) + frame(0x42, b"?"),  # unknown kind
        frame(Kind.UUID, CALL.bytes) + frame(Kind.UUID, CALL.bytes),  # a second UUID
    ],
)
def test_frames_that_cannot_be_right_are_errors(stream: bytes) -> None:
    with pytest.raises(AudioSocketError):
        AudioSocketParser().feed(stream)


def test_an_incomplete_frame_waits_for_the_rest() -> None:
    parser = AudioSocketParser()
    assert parser.feed(frame(Kind.UUID, CALL.bytes) + b"\x10\x01\x40" + b"\x00" * 20) == [
        CallIdentified(CALL)
    ]
    assert parser.pending == 23


def test_serve_flag_is_documented_and_checked() -> None:
    exe = [sys.executable, "-m", "voice_pipeline.cli", "serve"]
    out = subprocess.run([*exe, "--help"], capture_output=True, text=True, timeout=120)
    assert "--audiosocket-port" in out.stdout
    bad = subprocess.run([*exe, "--audiosocket-port", "70000"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "telephony.audiosocket_port" in bad.stderr
