"""Wire protocol v1 (docs/protocol.md), without I/O.

:class:`ClientProtocol` decodes one client's frames in order and raises
:class:`ClientMessageError` (with the protocol's error ``code``) for anything the
server cannot use; the connection answers with :func:`error_message` and goes on.
:func:`event_message` maps session events to the JSON the client receives.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from voice_pipeline import events as ev
from voice_pipeline.config import BudgetConfig
from voice_pipeline.errors import RemoteProtocolError
from voice_pipeline.ledger import STAGES

PROTOCOL_VERSION = 1
MIN_RATE_HZ = 8000
MAX_RATE_HZ = 48000

Json = dict[str, Any]

#: longest excerpt of a client's value quoted back in an error message
_QUOTE_CHARS = 60


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


# ---------------------------------------------------------------- client -> server


@dataclass(frozen=True, slots=True)
class Capabilities:
    playback_reports: bool = False
    echo_cancellation: bool = False


@dataclass(frozen=True, slots=True)
class Start:
    sample_rate_hz: int
    output_rate_hz: int
    capabilities: Capabilities


@dataclass(frozen=True, slots=True)
class Playback:
    #: reply samples the listener has played since ``start`` (at the output rate)
    played: int
    #: set when this report acknowledges ``audio.clear`` of that turn
    cleared: int | None = None


@dataclass(frozen=True, slots=True)
class Interrupt:
    pass


@dataclass(frozen=True, slots=True)
class PttStart:
    pass


@dataclass(frozen=True, slots=True)
class PttEnd:
    pass


@dataclass(frozen=True, slots=True)
class Stop:
    pass


ClientMessage = Start | Playback | Interrupt | PttStart | PttEnd | Stop

_BARE: dict[str, ClientMessage] = {
    "interrupt": Interrupt(),
    "ptt.start": PttStart(),
    "ptt.end": PttEnd(),
    "stop": Stop(),
}
KNOWN_TYPES = ("start", "playback", *_BARE)


def _quote(value: object) -> str:
    """``repr(value)``, cut short: an error never echoes a megabyte back to the client."""
    try:
        text = repr(value)
    except RecursionError:  # nested deeper than repr goes
        text = type(value).__name__
    return text if len(text) <= _QUOTE_CHARS else text[: _QUOTE_CHARS - 3] + "..."


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


def parse_message(text: str) -> ClientMessage:
    """One text frame -> a message. Raises :class:`ClientMessageError`."""
    try:
        msg = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested too deep ("[[[[...")
        raise ClientMessageError(
            ErrorCode.BAD_JSON, "text frames must hold one JSON object; audio goes in binary frames"
        ) from None
    if not isinstance(msg, dict):
        raise ClientMessageError(ErrorCode.BAD_JSON, "a message must be a JSON object with a 'type'")
    kind = msg.get("type")
    if kind == "start":
        return parse_start(msg)
    if kind == "playback":
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


def parse_audio(data: bytes, max_frame_bytes: int) -> NDArray[np.int16]:
    """One binary frame -> PCM16 samples. Raises :class:`ClientMessageError`."""
    if len(data) > max_frame_bytes:
        raise ClientMessageError(
            ErrorCode.FRAME_TOO_LARGE, f"audio frame of {len(data)} bytes; at most {max_frame_bytes}"
        )
    if len(data) % 2:
        raise ClientMessageError(
            ErrorCode.BAD_AUDIO, f"audio frame of {len(data)} bytes: PCM16 needs an even number"
        )
    return np.frombuffer(data, dtype="<i2").astype(np.int16)


class ClientProtocol:
    """One client's frames, in order: ``start`` first and once, audio only after it."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.start: Start | None = None

    def text(self, text: str) -> ClientMessage:
        msg = parse_message(text)
        if isinstance(msg, Start):
            if self.start is not None:
                raise ClientMessageError(ErrorCode.ALREADY_STARTED, "the session has already started")
            self.start = msg
        elif self.start is None:
            raise ClientMessageError(ErrorCode.NOT_STARTED, "send 'start' first")
        return msg

    def binary(self, data: bytes) -> NDArray[np.int16]:
        if self.start is None:
            raise ClientMessageError(ErrorCode.NOT_STARTED, "audio before 'start'")
        return parse_audio(data, self.max_frame_bytes)


# ---------------------------------------------------------------- server -> client


def dumps(msg: Json) -> str:
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False)


def error_message(code: ErrorCode, message: str) -> Json:
    return {"type": "error", "code": str(code), "message": message}


def ready_message(session_id: str, start: Start, max_frame_bytes: int, budget: BudgetConfig) -> Json:
    return {
        "type": "ready",
        "version": PROTOCOL_VERSION,
        "session_id": session_id,
        "input_sample_rate": start.sample_rate_hz,
        "output_sample_rate": start.output_rate_hz,
        "max_frame_bytes": max_frame_bytes,
        "budgets": {s.name: getattr(budget, s.budget_key) for s in STAGES},
    }


def audio_header(turn_id: int, samples: int) -> Json:
    return {"type": "assistant.audio", "turn_id": turn_id, "samples": samples}


def audio_clear(turn_id: int) -> Json:
    return {"type": "audio.clear", "turn_id": turn_id}


def event_message(event: ev.Event, origin_ns: int) -> Json | None:
    """The client's view of a session event (None: not sent). ``origin_ns`` is the
    session's start; the latency record's marks are in ms since then."""
    match event:
        case ev.SpeechStarted(turn_id=tid):
            return {"type": "speech.started", "turn_id": tid}
        case ev.TurnContinued(turn_id=tid):
            return {"type": "turn.continued", "turn_id": tid}
        case ev.TranscriptPartial(turn_id=tid, committed=committed, tentative=tentative):
            return {
                "type": "transcript.partial",
                "turn_id": tid,
                "committed": committed,
                "tentative": tentative,
            }
        case ev.TranscriptFinalized(turn_id=tid, text=text):
            return {"type": "transcript.final", "turn_id": tid, "text": text}
        case ev.AssistantTextStreamed(turn_id=tid, text=text):
            return {"type": "assistant.text", "turn_id": tid, "delta": text}
        case ev.ReplyResumed(turn_id=tid, reason=reason):
            return {"type": "reply.resumed", "turn_id": tid, "reason": reason}
        case ev.ReplyInterrupted(turn_id=tid, reason=reason):
            return {"type": "reply.interrupted", "turn_id": tid, "reason": reason}
        case ev.BudgetExceeded(turn_id=tid, stage=stage, duration_ms=ms, budget_ms=budget):
            return {
                "type": "budget.exceeded",
                "turn_id": tid,
                "stage": stage,
                "duration_ms": round(ms, 1),
                "budget_ms": budget,
            }
        case ev.TurnCompleted(turn_id=tid, record=record):
            return {"type": "turn.latency", "turn_id": tid, "record": record.as_dict(origin_ns)}
        case ev.TurnFailed(turn_id=tid, stage=stage, message=message, retryable=retryable):
            return {
                "type": "turn.failed",
                "turn_id": tid,
                "stage": stage,
                "message": message,
                "retryable": retryable,
            }
        case ev.EndpointDetected() | ev.ReplyPaused():
            # the end of speech shows in transcript.final; a pause is the transport's audio.clear
            return None
        case ev.ReplyStarted() | ev.ClauseSynthesized() | ev.ReplyGenerated():
            return None  # the realtime protocol's (/v1/realtime); /ws has audio and turn.latency
    return None  # pragma: no cover  (the match is exhaustive)
