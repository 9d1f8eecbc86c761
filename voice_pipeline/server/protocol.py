"""The server's side of wire protocol v1 (docs/protocol.md), without I/O.

The messages, both ways, are :mod:`voice_pipeline.wire` (typed, ``serialize`` and parse).
Here: :class:`ClientProtocol` decodes one client's frames in order and raises
:class:`ClientMessageError` (with the protocol's error ``code``) for anything the server
cannot use (the connection answers with an :class:`ErrorReported` and goes on);
:func:`server_message` maps a session event to the message the client receives.
:func:`event_message`, :func:`ready_message`, :func:`error_message`, :func:`audio_header`
and :func:`audio_clear` give those messages' JSON objects.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.typing import NDArray

from voice_pipeline import events as ev
from voice_pipeline.config import BudgetConfig
from voice_pipeline.ledger.ledger import ALL_STAGES
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.wire import server_messages as sm
from voice_pipeline.wire.client_messages import (
    KNOWN_TYPES,
    MAX_RATE_HZ,
    MIN_RATE_HZ,
    Capabilities,
    ClientMessage,
    ClientMessageError,
    ErrorCode,
    Interrupt,
    Playback,
    PttEnd,
    PttStart,
    Start,
    Stop,
    parse_start,
)
from voice_pipeline.wire.client_messages import parse_client_message as parse_message
from voice_pipeline.wire.codec import PROTOCOL_VERSION, Json, dumps
from voice_pipeline.wire.server_messages import ErrorReported

__all__ = [
    "KNOWN_TYPES",
    "MAX_RATE_HZ",
    "MIN_RATE_HZ",
    "PROTOCOL_VERSION",
    "Capabilities",
    "ClientMessage",
    "ClientMessageError",
    "ClientProtocol",
    "ErrorCode",
    "ErrorReported",
    "Interrupt",
    "Json",
    "Playback",
    "PttEnd",
    "PttStart",
    "Start",
    "Stop",
    "audio_clear",
    "audio_header",
    "dumps",
    "error_message",
    "event_message",
    "parse_audio",
    "parse_message",
    "parse_start",
    "ready",
    "ready_message",
    "server_message",
]


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


def ready(session_id: str, start: Start, max_frame_bytes: int, budget: BudgetConfig) -> sm.Ready:
    budgets = {str(s.name): float(getattr(budget, s.budget_key)) for s in ALL_STAGES}
    return sm.Ready(
        PROTOCOL_VERSION, session_id, start.sample_rate_hz, start.output_rate_hz, max_frame_bytes, budgets
    )


def on_session_timeline(record: TurnRecord, origin_ns: int) -> TurnRecord:
    """``record`` with its marks counted from ``origin_ns`` (the session's start)."""
    return dataclasses.replace(record, marks_ns={k: v - origin_ns for k, v in record.marks_ns.items()})


def server_message(event: ev.Event, origin_ns: int) -> sm.KnownMessage | None:
    """The client's view of a session event (None: not sent). ``origin_ns`` is the
    session's start; the latency record's marks are in ms since then."""
    match event:
        case ev.SpeechStarted(turn_id=tid):
            return sm.SpeechStarted(tid)
        case ev.TurnContinued(turn_id=tid):
            return sm.TurnContinued(tid)
        case ev.TranscriptPartial(turn_id=tid, committed=committed, tentative=tentative):
            return sm.TranscriptPartial(tid, committed, tentative)
        case ev.TranscriptFinalized(turn_id=tid, text=text):
            return sm.TranscriptFinal(tid, text)
        case ev.AssistantTextStreamed(turn_id=tid, text=text):
            return sm.AssistantText(tid, text)
        case ev.ReplyResumed(turn_id=tid, reason=reason):
            return sm.ReplyResumed(tid, reason)
        case ev.ReplyInterrupted(turn_id=tid, reason=reason):
            return sm.ReplyInterrupted(tid, reason)
        case ev.BudgetExceeded(turn_id=tid, stage=stage, duration_ms=ms, budget_ms=budget):
            return sm.BudgetExceeded(tid, stage, round(ms, 1), budget)
        case ev.TurnCompleted(turn_id=tid, record=record):
            return sm.TurnLatency(tid, on_session_timeline(record, origin_ns))
        case ev.TurnFailed(turn_id=tid, stage=stage, message=message, retryable=retryable):
            return sm.TurnFailed(tid, stage, message, retryable)
        case ev.EndpointDetected() | ev.ReplyPaused():
            # the end of speech shows in transcript.final; a pause is the transport's audio.clear
            return None
        case ev.ToolCallDone(turn_id=tid, call_id=call_id, name=name, arguments=arguments):
            return sm.ToolCalled(tid, call_id, name, arguments)
        case ev.ToolResult(turn_id=tid, call_id=call_id, name=name, output=output, error=error):
            return sm.ToolReturned(tid, call_id, name, output, error)
        case ev.ToolCallStreamed():
            return None  # /ws tells a call once it is complete (tool.call)
        case ev.ReplyStarted() | ev.ClauseSynthesized() | ev.ReplyGenerated():
            return None  # the realtime protocol's (/v1/realtime); /ws has audio and turn.latency
    return None  # pragma: no cover  (the match is exhaustive)


def event_message(event: ev.Event, origin_ns: int) -> Json | None:
    msg = server_message(event, origin_ns)
    return None if msg is None else msg.to_json()


def ready_message(session_id: str, start: Start, max_frame_bytes: int, budget: BudgetConfig) -> Json:
    return ready(session_id, start, max_frame_bytes, budget).to_json()


def error_message(code: ErrorCode, message: str) -> Json:
    return ErrorReported(str(code), message).to_json()


def audio_header(turn_id: int, samples: int) -> Json:
    return sm.AssistantAudio(turn_id, samples).to_json()


def audio_clear(turn_id: int) -> Json:
    return sm.AudioClear(turn_id).to_json()
