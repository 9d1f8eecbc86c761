"""Twilio Media Streams: the pure protocol (no I/O) and the paced transport with a fake socket."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
import pytest

from voice_pipeline.telephony import mulaw
from voice_pipeline.telephony.twilio import (
    DtmfReceived,
    MarkPlayed,
    MediaReceived,
    StreamStarted,
    StreamStopped,
    TwilioMessageError,
    TwilioProtocol,
)
from voice_pipeline.telephony.twilio_transport import TwilioTransport

SID = "MZ1"
FORMAT = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}


def start(**over: Any) -> str:
    body = {"streamSid": SID, "callSid": "CA1", "tracks": ["inbound"], "customParameters": {"token": "t"}}
    body["mediaFormat"] = FORMAT
    body.update(over)
    return json.dumps({"event": "start", "start": body, "streamSid": SID})


def media(payload: str, sid: str = SID) -> str:
    return json.dumps(
        {"event": "media", "streamSid": sid, "media": {"chunk": "2", "timestamp": "40", "payload": payload}}
    )


def started() -> TwilioProtocol:
    p = TwilioProtocol()
    assert isinstance(p.receive(start()), StreamStarted)
    return p


def test_a_call_in_order() -> None:
    p = TwilioProtocol()
    p.receive('{"event": "connected", "protocol": "Call", "version": "1.0.0"}')
    s = p.receive(start())
    assert s == StreamStarted(SID, "CA1", ("inbound",), {"token": "t"})
    m = p.receive(media(base64.b64encode(b"\xff" * 160).decode()))
    assert m == MediaReceived(b"\xff" * 160, "inbound", 2, 40)
    assert p.receive(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": "a"}})) == MarkPlayed(
        "a"
    )
    dtmf = {"event": "dtmf", "streamSid": SID, "dtmf": {"track": "inbound_track", "digit": "#"}}
    assert p.receive(json.dumps(dtmf)) == DtmfReceived("#")
    assert p.receive(json.dumps({"event": "stop", "streamSid": SID, "stop": {}})) == StreamStopped()


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1]",
        '{"event": "dance"}',
        '{"no": "event"}',
        media("!!!!"),
        media("AAAA", sid="MZ2"),
        media("A" * 20000),
        json.dumps({"event": "media", "streamSid": SID, "media": {"payload": 5}}),
        json.dumps({"event": "mark", "streamSid": SID, "mark": {}}),
        start(),  # a second start
    ],
)
def test_unusable_messages_are_client_errors(text: str) -> None:
    with pytest.raises(TwilioMessageError) as err:
        started().receive(text)
    assert not err.value.fatal


def test_media_before_start_is_an_error() -> None:
    with pytest.raises(TwilioMessageError, match="before 'start'"):
        TwilioProtocol().receive(media("AAAA"))


@pytest.mark.parametrize(
    "fmt",
    [{**FORMAT, "encoding": "audio/x-alaw"}, {**FORMAT, "sampleRate": 16000}, {**FORMAT, "channels": 2}],
)
def test_an_unsupported_media_format_is_fatal(fmt: dict[str, Any]) -> None:
    with pytest.raises(TwilioMessageError) as err:
        TwilioProtocol().receive(start(mediaFormat=fmt))
    assert err.value.fatal


# ------------------------------------------------------------ the transport, fake socket


class FakeSocket:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, text: str) -> None:
        self.sent.append(json.loads(text))

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.sent if m["event"] == kind]


async def test_transport_frames_marks_and_clear() -> None:
    sock = FakeSocket()
    t = TwilioTransport(sock.send, SID, lead_ms=10_000, mark_every_frames=10)  # no pacing wait
    t.start()
    pcm = (np.sin(np.arange(8000 * 0.5 + 50) / 10) * 8000).astype(np.int16)  # 0.5 s + 50 samples
    await t.play(1, pcm)
    while t.frames_sent < 26:  # noqa: ASYNC110 -- a counter, no event to wait on
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.01)
    media = sock.events("media")
    assert len(media) == 26 and all(m["streamSid"] == SID for m in sock.sent)
    payload = b"".join(base64.b64decode(m["media"]["payload"]) for m in media)
    assert len(payload) == 26 * 160 and payload[: len(pcm)] == mulaw.encode(pcm)
    marks = [m["mark"]["name"] for m in sock.events("mark")]
    assert len(marks) == 3  # after frames 10 and 20, and at the chunk's end
    t.mark_played(marks[0])
    assert t.played_samples(1) == 1600
    t.clear(1)
    await asyncio.sleep(0.01)
    assert sock.sent[-1] == {"event": "clear", "streamSid": SID}
    for name in marks[1:]:  # Twilio echoes the pending marks on clear: not heard
        t.mark_played(name)
    assert t.played_samples(1) == 1600
    t.clear(1)  # nothing sent since: not repeated
    await asyncio.sleep(0.01)
    assert len(sock.events("clear")) == 1
    await t.aclose()
    await t.drain(1)  # closed: returns at once
