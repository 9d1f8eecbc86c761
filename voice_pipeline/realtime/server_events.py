"""Server events of the Realtime protocol, typed, and their serializer (pure).

One frozen dataclass per server event (named in the past tense; the wire type
is its ``TYPE``), :data:`ServerEvent` their union. Events carry no ``event_id``:
:meth:`ServerEventEncoder.encode` stamps a fresh one when the event is sent,
so events compare by value in tests. Field names are the wire's: an event's
fields become the JSON object's, with items, responses, content parts, audio
(base64) and errors serialized as the openai SDK's models expect (the tests
validate every event against them).

:class:`TurnLatencyMeasured` is this server's own event
(``voice_pipeline.turn.latency``, one per turn, the latency ledger's record):
standard clients ignore event types they do not know (the openai SDK's
iterator yields it as an untyped event and goes on).
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from voice_pipeline.realtime.audio import AudioFormat, format_json
from voice_pipeline.realtime.errors import ProtocolError
from voice_pipeline.realtime.ids import IdKind, Ids
from voice_pipeline.realtime.items import Item, OutputAudio, OutputText, item_json
from voice_pipeline.realtime.session_config import Modality, RealtimeSessionConfig, session_json
from voice_pipeline.realtime.wire import Json


class ResponseStatus(enum.StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    INCOMPLETE = "incomplete"
    FAILED = "failed"


class StatusReason(enum.StrEnum):
    #: cancelled: the user spoke over the response
    TURN_DETECTED = "turn_detected"
    #: cancelled: response.cancel (or output_audio_buffer.clear)
    CLIENT_CANCELLED = "client_cancelled"
    #: incomplete: the reply hit its token limit
    MAX_OUTPUT_TOKENS = "max_output_tokens"


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int
    #: of the input tokens, those served from the LLM's prefix cache
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ResponseInfo:
    """The ``response`` object of response.created / response.done."""

    id: str
    status: ResponseStatus
    output_modality: Modality
    output_format: AudioFormat
    voice: str
    #: None = "inf"
    max_output_tokens: int | None
    #: None for an out-of-band response (conversation "none")
    conversation_id: str | None
    metadata: tuple[tuple[str, str], ...] | None = None
    output: tuple[Item, ...] = ()
    reason: StatusReason | None = None
    #: why a failed response failed
    error: ProtocolError | None = None
    usage: Usage | None = None


# ---------------------------------------------------------------- the events


@dataclass(frozen=True, slots=True)
class SessionCreated:
    TYPE: ClassVar[str] = "session.created"
    session: RealtimeSessionConfig
    session_id: str


@dataclass(frozen=True, slots=True)
class SessionUpdated:
    TYPE: ClassVar[str] = "session.updated"
    session: RealtimeSessionConfig
    session_id: str


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    TYPE: ClassVar[str] = "input_audio_buffer.speech_started"
    #: ms of input audio since the session started (includes the prefix padding)
    audio_start_ms: int
    item_id: str


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    TYPE: ClassVar[str] = "input_audio_buffer.speech_stopped"
    audio_end_ms: int
    item_id: str


@dataclass(frozen=True, slots=True)
class InputCommitted:
    TYPE: ClassVar[str] = "input_audio_buffer.committed"
    item_id: str
    previous_item_id: str | None


@dataclass(frozen=True, slots=True)
class InputCleared:
    TYPE: ClassVar[str] = "input_audio_buffer.cleared"


@dataclass(frozen=True, slots=True)
class ItemAdded:
    TYPE: ClassVar[str] = "conversation.item.added"
    item: Item
    previous_item_id: str | None


@dataclass(frozen=True, slots=True)
class ItemDone:
    TYPE: ClassVar[str] = "conversation.item.done"
    item: Item
    previous_item_id: str | None


@dataclass(frozen=True, slots=True)
class InputTranscriptDelta:
    TYPE: ClassVar[str] = "conversation.item.input_audio_transcription.delta"
    item_id: str
    content_index: int
    delta: str


@dataclass(frozen=True, slots=True)
class InputTranscriptCompleted:
    TYPE: ClassVar[str] = "conversation.item.input_audio_transcription.completed"
    item_id: str
    content_index: int
    transcript: str
    #: the transcribed audio's length (usage is billed by duration)
    audio_seconds: float


@dataclass(frozen=True, slots=True)
class InputTranscriptFailed:
    TYPE: ClassVar[str] = "conversation.item.input_audio_transcription.failed"
    item_id: str
    content_index: int
    error: ProtocolError


@dataclass(frozen=True, slots=True)
class ResponseCreated:
    TYPE: ClassVar[str] = "response.created"
    response: ResponseInfo


@dataclass(frozen=True, slots=True)
class ResponseDone:
    TYPE: ClassVar[str] = "response.done"
    response: ResponseInfo


@dataclass(frozen=True, slots=True)
class OutputItemAdded:
    TYPE: ClassVar[str] = "response.output_item.added"
    response_id: str
    output_index: int
    item: Item


@dataclass(frozen=True, slots=True)
class OutputItemDone:
    TYPE: ClassVar[str] = "response.output_item.done"
    response_id: str
    output_index: int
    item: Item


@dataclass(frozen=True, slots=True)
class ContentPartAdded:
    TYPE: ClassVar[str] = "response.content_part.added"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | OutputAudio


@dataclass(frozen=True, slots=True)
class ContentPartDone:
    TYPE: ClassVar[str] = "response.content_part.done"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | OutputAudio


@dataclass(frozen=True, slots=True)
class AudioDelta:
    TYPE: ClassVar[str] = "response.output_audio.delta"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    #: wire bytes of the output format (base64 on the wire)
    delta: bytes


@dataclass(frozen=True, slots=True)
class AudioDone:
    TYPE: ClassVar[str] = "response.output_audio.done"
    response_id: str
    item_id: str
    output_index: int
    content_index: int


@dataclass(frozen=True, slots=True)
class AudioTranscriptDelta:
    TYPE: ClassVar[str] = "response.output_audio_transcript.delta"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    delta: str


@dataclass(frozen=True, slots=True)
class AudioTranscriptDone:
    TYPE: ClassVar[str] = "response.output_audio_transcript.done"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    transcript: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    TYPE: ClassVar[str] = "response.output_text.delta"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    delta: str


@dataclass(frozen=True, slots=True)
class TextDone:
    TYPE: ClassVar[str] = "response.output_text.done"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    text: str


@dataclass(frozen=True, slots=True)
class FunctionArgumentsDelta:
    TYPE: ClassVar[str] = "response.function_call_arguments.delta"
    response_id: str
    item_id: str
    output_index: int
    call_id: str
    delta: str


@dataclass(frozen=True, slots=True)
class FunctionArgumentsDone:
    TYPE: ClassVar[str] = "response.function_call_arguments.done"
    response_id: str
    item_id: str
    output_index: int
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class OutputAudioStarted:
    TYPE: ClassVar[str] = "output_audio_buffer.started"
    response_id: str


@dataclass(frozen=True, slots=True)
class OutputAudioStopped:
    TYPE: ClassVar[str] = "output_audio_buffer.stopped"
    response_id: str


@dataclass(frozen=True, slots=True)
class OutputAudioCleared:
    TYPE: ClassVar[str] = "output_audio_buffer.cleared"
    response_id: str


@dataclass(frozen=True, slots=True)
class ItemTruncated:
    TYPE: ClassVar[str] = "conversation.item.truncated"
    item_id: str
    content_index: int
    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class ItemDeleted:
    TYPE: ClassVar[str] = "conversation.item.deleted"
    item_id: str


@dataclass(frozen=True, slots=True)
class ItemRetrieved:
    TYPE: ClassVar[str] = "conversation.item.retrieved"
    item: Item


@dataclass(frozen=True, slots=True)
class ErrorOccurred:
    TYPE: ClassVar[str] = "error"
    error: ProtocolError


@dataclass(frozen=True, slots=True)
class TurnLatencyMeasured:
    """This server's own event: one turn's latency ledger record (``TurnRecord.as_dict()``)."""

    TYPE: ClassVar[str] = "voice_pipeline.turn.latency"
    record: Mapping[str, object]
    #: the response that answered the turn, and the user item it answered (if known)
    response_id: str | None = None
    item_id: str | None = None


ServerEvent = (  # fmt: skip
    SessionCreated | SessionUpdated | SpeechStarted | SpeechStopped | InputCommitted | InputCleared
    | ItemAdded | ItemDone | InputTranscriptDelta | InputTranscriptCompleted | InputTranscriptFailed
    | ResponseCreated | ResponseDone | OutputItemAdded | OutputItemDone | ContentPartAdded
    | ContentPartDone | AudioDelta | AudioDone | AudioTranscriptDelta | AudioTranscriptDone
    | TextDelta | TextDone | FunctionArgumentsDelta | FunctionArgumentsDone | OutputAudioStarted
    | OutputAudioStopped | OutputAudioCleared | ItemTruncated | ItemDeleted | ItemRetrieved
    | ErrorOccurred | TurnLatencyMeasured
)

# ---------------------------------------------------------------- serializing


def error_json(error: ProtocolError) -> Json:
    return {
        "type": str(error.type),
        "code": str(error.code),
        "message": error.message,
        "param": error.param,
        "event_id": error.event_id,
    }


def response_json(r: ResponseInfo) -> Json:
    details: Json | None = None
    if r.status is not ResponseStatus.IN_PROGRESS and r.status is not ResponseStatus.COMPLETED:
        details = {"type": str(r.status), "reason": None if r.reason is None else str(r.reason)}
        if r.error is not None:
            details["error"] = {
                "type": str(r.error.type),
                "code": str(r.error.code),
                "message": r.error.message,
            }
    usage: Json | None = None
    if r.usage is not None:
        u = r.usage
        usage = {
            "total_tokens": u.input_tokens + u.output_tokens,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "input_token_details": {
                "text_tokens": u.input_tokens,
                "audio_tokens": 0,
                "cached_tokens": u.cached_tokens,
            },
            "output_token_details": {"text_tokens": u.output_tokens, "audio_tokens": 0},
        }
    return {
        "object": "realtime.response",
        "id": r.id,
        "status": str(r.status),
        "status_details": details,
        "output": [item_json(i) for i in r.output],
        "conversation_id": r.conversation_id,
        "output_modalities": [str(r.output_modality)],
        "max_output_tokens": "inf" if r.max_output_tokens is None else r.max_output_tokens,
        "audio": {"output": {"format": format_json(r.output_format), "voice": r.voice}},
        "usage": usage,
        "metadata": None if r.metadata is None else dict(r.metadata),
    }


def part_json(part: OutputText | OutputAudio) -> Json:
    """A content part as response.content_part.* carry it (types "text" / "audio")."""
    if isinstance(part, OutputText):
        return {"type": "text", "text": part.text}
    return {"type": "audio", "transcript": part.transcript}


def _value(value: Any) -> Any:
    match value:
        case bytes():
            return base64.b64encode(value).decode("ascii")
        case ResponseInfo():
            return response_json(value)
        case ProtocolError():
            return error_json(value)
        case OutputText() | OutputAudio():
            return part_json(value)
        case enum.Enum():
            return str(value.value)
        case _ if isinstance(value, Item):
            return item_json(value)
    return value


def encode(event: ServerEvent, event_id: str) -> Json:
    """The event as the JSON object sent to the client."""
    out: Json = {"type": event.TYPE, "event_id": event_id}
    match event:
        case SessionCreated(session=cfg, session_id=sid) | SessionUpdated(session=cfg, session_id=sid):
            out["session"] = session_json(cfg, sid)
        case InputTranscriptCompleted():
            out |= {
                "item_id": event.item_id,
                "content_index": event.content_index,
                "transcript": event.transcript,
                "usage": {"type": "duration", "seconds": round(event.audio_seconds, 3)},
            }
        case InputTranscriptFailed():
            error = error_json(event.error)
            del error["event_id"]  # a transcription fails on its own: no client event caused it
            out |= {
                "item_id": event.item_id,
                "content_index": event.content_index,
                "error": error,
            }
        case TurnLatencyMeasured():
            out |= {"response_id": event.response_id, "item_id": event.item_id, "record": dict(event.record)}
        case _:
            out |= {f.name: _value(getattr(event, f.name)) for f in fields(event)}
    return out


def dumps(message: Json) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


class ServerEventEncoder:
    """Server events -> JSON text, each with a fresh ``event_...`` id from ``ids``."""

    def __init__(self, ids: Ids) -> None:
        self._ids = ids

    def encode(self, event: ServerEvent) -> Json:
        return encode(event, self._ids.new(IdKind.EVENT))

    def text(self, event: ServerEvent) -> str:
        return dumps(self.encode(event))
