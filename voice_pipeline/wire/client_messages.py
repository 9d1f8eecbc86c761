"""Client -> server messages of ``/ws`` protocol v1 (docs/protocol.md), typed both ways.

A client builds a message and sends ``serialize()``; the server parses each text frame
with :func:`parse_client_message`, which raises :class:`ClientMessageError` (with the
protocol's error ``code``) for anything it cannot use: the server answers with an
``error`` and goes on. The parser is strict on what it needs and lenient on the rest
(unknown fields are ignored); it never echoes more than a short excerpt of a bad value.
The binary frames (PCM16 LE mono) are :func:`pcm16_frame` one way and the server's
``parse_audio`` (server/protocol.py) the other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from voice_pipeline.audio import to_int16
from voice_pipeline.errors import RemoteProtocolError
from voice_pipeline.errors import quote as _quote
from voice_pipeline.wire.codec import PROTOCOL_VERSION, Json, Message, loads

MIN_RATE_HZ = 8000
MAX_RATE_HZ = 48000

#: longest excerpt of a client's value quoted back in an error message


class ErrorCode(enum.StrEnum):
    BAD_JSON = "bad_json"
    UNKNOWN_TYPE = "unknown_type"
    BAD_FIELD = "bad_field"
    NOT_STARTED = "not_started"
    ALREADY_STARTED = "already_started"
    BAD_AUDIO = "bad_audio"
    FRAME_TOO_LARGE = "frame_too_large"
    UNSUPPORTED_VERSION = "unsupported_version"


class ClientMessageError(RemoteProtocolError):
    """The client's last frame was not usable. A client error: the session goes on."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Capabilities:
    playback_reports: bool = False
    echo_cancellation: bool = False


@dataclass(frozen=True, slots=True)
class Start(Message):
    """Opens the session (must be first); answered by ``ready``."""

    TYPE: ClassVar[str] = "start"
    sample_rate_hz: int
    output_rate_hz: int
    capabilities: Capabilities = field(default_factory=Capabilities)

    def to_json(self) -> Json:
        return {
            "type": self.TYPE,
            "version": PROTOCOL_VERSION,
            "sample_rate": self.sample_rate_hz,
            "format": "pcm16",
            "output_sample_rate": self.output_rate_hz,
            "capabilities": {
                "playback_reports": self.capabilities.playback_reports,
                "echo_cancellation": self.capabilities.echo_cancellation,
            },
        }


@dataclass(frozen=True, slots=True)
class Playback(Message):
    TYPE: ClassVar[str] = "playback"
    #: reply samples the listener has played since ``start`` (at the output rate)
    played: int
    #: set when this report acknowledges ``audio.clear`` of that turn
    cleared: int | None = None

    def to_json(self) -> Json:
        msg: Json = {"type": self.TYPE, "played": self.played}
        if self.cleared is not None:
            msg["cleared"] = self.cleared
        return msg


@dataclass(frozen=True, slots=True)
class Interrupt(Message):
    TYPE: ClassVar[str] = "interrupt"


@dataclass(frozen=True, slots=True)
class PttStart(Message):
    TYPE: ClassVar[str] = "ptt.start"


@dataclass(frozen=True, slots=True)
class PttEnd(Message):
    TYPE: ClassVar[str] = "ptt.end"


@dataclass(frozen=True, slots=True)
class Stop(Message):
    TYPE: ClassVar[str] = "stop"


ClientMessage = Start | Playback | Interrupt | PttStart | PttEnd | Stop

_BARE: dict[str, ClientMessage] = {m.TYPE: m for m in (Interrupt(), PttStart(), PttEnd(), Stop())}
KNOWN_TYPES = (Start.TYPE, Playback.TYPE, *_BARE)


def pcm16_frame(samples: NDArray[np.float32]) -> bytes:
    """Microphone audio (float32 in [-1, 1]) as one binary frame: PCM16 little-endian."""
    return to_int16(samples).astype("<i2").tobytes()


def _int_field(msg: Json, name: str, default: int | None = None) -> int:
    value = msg.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClientMessageError(ErrorCode.BAD_FIELD, f"'{name}' must be an integer, got {_quote(value)}")
    return value


def _rate_field(msg: Json, name: str, default: int | None = None) -> int:
    rate = _int_field(msg, name, default)
    if not MIN_RATE_HZ <= rate <= MAX_RATE_HZ:
        raise ClientMessageError(
            ErrorCode.BAD_FIELD, f"'{name}' must be {MIN_RATE_HZ}..{MAX_RATE_HZ} Hz, got {rate}"
        )
    return rate


def parse_start(msg: Json) -> Start:
    version = msg.get("version")
    if version != PROTOCOL_VERSION:
        raise ClientMessageError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"protocol version {_quote(version)} is not supported; this server speaks {PROTOCOL_VERSION}",
        )
    if msg.get("format", "pcm16") != "pcm16":
        raise ClientMessageError(
            ErrorCode.BAD_FIELD, f"'format' must be \"pcm16\", got {_quote(msg['format'])}"
        )
    rate = _rate_field(msg, "sample_rate")
    out_rate = _rate_field(msg, "output_sample_rate", rate)
    caps = msg.get("capabilities", {})
    if not isinstance(caps, dict):
        raise ClientMessageError(ErrorCode.BAD_FIELD, "'capabilities' must be an object")
    flags: dict[str, bool] = {}
    for name in ("playback_reports", "echo_cancellation"):
        value = caps.get(name, False)
        if not isinstance(value, bool):
            raise ClientMessageError(ErrorCode.BAD_FIELD, f"'capabilities.{name}' must be true or false")
        flags[name] = value
    return Start(rate, out_rate, Capabilities(**flags))


def parse_client_message(text: str) -> ClientMessage:
    """One text frame -> a message. Raises :class:`ClientMessageError`."""
    try:
        msg = loads(text)
    except ValueError:
        raise ClientMessageError(
            ErrorCode.BAD_JSON, "text frames must hold one JSON object; audio goes in binary frames"
        ) from None
    if not isinstance(msg, dict):
        raise ClientMessageError(ErrorCode.BAD_JSON, "a message must be a JSON object with a 'type'")
    kind = msg.get("type")
    if kind == Start.TYPE:
        return parse_start(msg)
    if kind == Playback.TYPE:
        played = _int_field(msg, "played")
        if played < 0:
            raise ClientMessageError(ErrorCode.BAD_FIELD, "'played' must be >= 0")
        cleared = msg.get("cleared")
        if cleared is not None:
            cleared = _int_field(msg, "cleared")
        return Playback(played, cleared)
    if isinstance(kind, str) and kind in _BARE:
        return _BARE[kind]
    raise ClientMessageError(
        ErrorCode.UNKNOWN_TYPE, f"unknown message type {_quote(kind)}; known: {', '.join(KNOWN_TYPES)}"
    )
