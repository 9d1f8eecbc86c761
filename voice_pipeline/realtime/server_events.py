"""Server events of the Realtime protocol, typed (pure).

One frozen dataclass per server event (named in the past tense; the wire type
is its ``TYPE``), :data:`ServerEvent` their union. Events carry no ``event_id``:
:class:`~.event_json.ServerEventEncoder` stamps a fresh one when the event is
sent, so events compare by value in tests. Field names are the wire's: an
event's fields become the JSON object's (:mod:`.event_json` serializes them as
the openai SDK's models expect; the tests validate every event against them).

:class:`TurnLatencyMeasured` is this server's own event
(``voice_pipeline.turn.latency``, one per turn, the latency ledger's record):
standard clients ignore event types they do not know (the openai SDK's
iterator yields it as an untyped event and goes on).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from voice_pipeline.realtime.audio import AudioFormat
from voice_pipeline.realtime.errors import ProtocolError
from voice_pipeline.realtime.items import Item, OutputAudio, OutputText
from voice_pipeline.realtime.session_config import Modality, RealtimeSessionConfig


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


# fmt: off
ServerEvent = (
    SessionCreated | SessionUpdated | SpeechStarted | SpeechStopped | InputCommitted | InputCleared
    | ItemAdded | ItemDone | InputTranscriptDelta | InputTranscriptCompleted | InputTranscriptFailed
    | ResponseCreated | ResponseDone | OutputItemAdded | OutputItemDone | ContentPartAdded
    | ContentPartDone | AudioDelta | AudioDone | AudioTranscriptDelta | AudioTranscriptDone
    | TextDelta | TextDone | FunctionArgumentsDelta | FunctionArgumentsDone | OutputAudioStarted
    | OutputAudioStopped | OutputAudioCleared | ItemTruncated | ItemDeleted | ItemRetrieved
    | ErrorOccurred | TurnLatencyMeasured
)
# fmt: on
