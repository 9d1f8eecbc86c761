"""Asterisk AudioSocket, the wire protocol without I/O.

Every message is a 3-byte header -- kind (1 byte), payload length (2 bytes,
big-endian) -- then the payload. Kinds: 0x00 hangup, 0x01 the call's UUID (16
bytes, first), 0x03 DTMF (one ASCII digit), 0x10 signed-linear 16-bit
little-endian 8 kHz mono audio (320 bytes per 20 ms), 0x11-0x18 the same at
higher rates, 0xff an error (optional 1-byte code).

:class:`AudioSocketParser` is fed bytes as they arrive and returns complete
events; a frame whose length cannot be right for its kind (a UUID that is not
16 bytes, odd or oversized audio, an unknown kind) raises
:class:`AudioSocketError`: the stream cannot be resynchronised, so the call ends.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from voice_pipeline.errors import RemoteProtocolError

HEADER_BYTES = 3
RATE_HZ = 8000
FRAME_BYTES = 320  # 20 ms of 8 kHz slin (16-bit linear PCM)
MAX_AUDIO_BYTES = 8192


class Kind(enum.IntEnum):
    HANGUP = 0x00
    UUID = 0x01
    DTMF = 0x03
    SLIN = 0x10
    ERROR = 0xFF


#: 0x11-0x18: 16-bit linear PCM at 12, 16, 24, 32, 44.1, 48, 96 and 192 kHz (slin12 ... slin192)
SLIN_RATES_HZ = {0x10: 8000, 0x11: 12000, 0x12: 16000, 0x13: 24000, 0x14: 32000, 0x15: 44100, 0x16: 48000}
SLIN_RATES_HZ |= {0x17: 96000, 0x18: 192000}


class AudioSocketError(RemoteProtocolError):
    """The peer sent a frame that cannot be right; the byte stream is lost, the call ends."""


@dataclass(frozen=True, slots=True)
class CallIdentified:
    call_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class AudioReceived:
    pcm: bytes  # int16 little-endian
    rate_hz: int


@dataclass(frozen=True, slots=True)
class DtmfReceived:
    digit: str


@dataclass(frozen=True, slots=True)
class HungUp:
    pass


@dataclass(frozen=True, slots=True)
class ErrorReceived:
    """The peer sent an error frame (an event, not an exception: the call then ends)."""

    code: int | None


AudioSocketEvent = CallIdentified | AudioReceived | DtmfReceived | HungUp | ErrorReceived


class AudioSocketParser:
    def __init__(self) -> None:
        self._buf = bytearray()
        self.call_id: uuid.UUID | None = None

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame waiting for the rest."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[AudioSocketEvent]:
        self._buf += data
        out: list[AudioSocketEvent] = []
        while len(self._buf) >= HEADER_BYTES:
            kind, length = self._buf[0], int.from_bytes(self._buf[1:3], "big")
            self._check(kind, length)
            if len(self._buf) < HEADER_BYTES + length:
                break
            payload = bytes(self._buf[HEADER_BYTES : HEADER_BYTES + length])
            del self._buf[: HEADER_BYTES + length]
            out.append(self._event(kind, payload))
        return out

    def _check(self, kind: int, length: int) -> None:
        if kind == Kind.UUID and length != 16:
            raise AudioSocketError(f"UUID frame of {length} bytes (must be 16)")
        if kind == Kind.DTMF and length != 1:
            raise AudioSocketError(f"DTMF frame of {length} bytes (must be 1)")
        if kind == Kind.HANGUP and length != 0:
            raise AudioSocketError(f"hangup frame of {length} bytes (must be 0)")
        if kind in SLIN_RATES_HZ and (length % 2 or length > MAX_AUDIO_BYTES):
            raise AudioSocketError(f"audio frame of {length} bytes (even, at most {MAX_AUDIO_BYTES})")
        if kind == Kind.ERROR and length > 1:
            raise AudioSocketError(f"error frame of {length} bytes")
        if kind not in SLIN_RATES_HZ and kind not in (Kind.UUID, Kind.DTMF, Kind.HANGUP, Kind.ERROR):
            raise AudioSocketError(f"unknown frame kind 0x{kind:02x}")
        if kind != Kind.UUID and self.call_id is None and kind != Kind.HANGUP:
            raise AudioSocketError(f"frame kind 0x{kind:02x} before the UUID")

    def _event(self, kind: int, payload: bytes) -> AudioSocketEvent:
        if kind == Kind.UUID:
            if self.call_id is not None:
                raise AudioSocketError("a second UUID")
            self.call_id = uuid.UUID(bytes=payload)
            return CallIdentified(self.call_id)
        if kind == Kind.DTMF:
            return DtmfReceived(payload.decode("ascii", "replace"))
        if kind == Kind.HANGUP:
            return HungUp()
        if kind == Kind.ERROR:
            return ErrorReceived(payload[0] if payload else None)
        return AudioReceived(payload, SLIN_RATES_HZ[kind])


def frame(kind: int, payload: bytes = b"") -> bytes:
    """One AudioSocket message."""
    return bytes([kind]) + len(payload).to_bytes(2, "big") + payload
