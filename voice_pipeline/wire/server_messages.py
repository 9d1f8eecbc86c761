"""Server -> client messages of ``/ws`` protocol v1 (docs/protocol.md), typed both ways.

One frozen dataclass per message type. Its fields are the message's, named as on the
wire (except :class:`Ready`'s, which carry their units; ``key`` in a field's metadata is
its wire name), in the wire's order; ``serialize()`` is the exact JSON text the server
sends and :func:`parse_server_message` gives the message back.

What a client cannot know (decided here, for every client):

* a ``type`` it does not know parses to :class:`Unknown` (the type and the raw object):
  a newer server may send more, and clients ignore it, as the browser page does;
* a known message's extra fields are ignored (a newer server may add some);
* a known message with a field missing or of the wrong type, or a frame that is not a
  JSON object with a string ``type``, is a :class:`ServerMessageError`: the server broke
  the protocol (a :class:`~voice_pipeline.errors.RemoteProtocolError` seen from the client).

:class:`TurnLatency` carries the ledger's :class:`~voice_pipeline.ledger.ledger.TurnRecord`
whose ``marks_ns`` count from the session's start (``ready``): on the wire they are ms
(:meth:`TurnRecord.as_dict`), parsed back by :meth:`TurnRecord.from_dict`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from voice_pipeline.errors import RemoteProtocolError
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.wire.codec import Json, Message, loads


class ServerMessageError(RemoteProtocolError):
    """A server's frame this client cannot use: not a message, or a known one malformed."""


class _Fields(Message):
    """Serialization by the dataclass fields: ``{"type": TYPE, key: value, ...}``."""

    __slots__ = ()

    def to_json(self) -> Json:
        msg: Json = {"type": self.TYPE}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            value = getattr(self, f.name)
            msg[f.metadata.get("key", f.name)] = value.as_dict() if isinstance(value, TurnRecord) else value
        return msg


@dataclass(frozen=True, slots=True)
class Ready(_Fields):
    """The session is live."""

    TYPE: ClassVar[str] = "ready"
    version: int
    session_id: str
    input_rate_hz: int = field(metadata={"key": "input_sample_rate"})
    output_rate_hz: int = field(metadata={"key": "output_sample_rate"})
    max_frame_bytes: int
    #: stage -> budget (ms)
    budgets_ms: dict[str, float] = field(metadata={"key": "budgets"})


@dataclass(frozen=True, slots=True)
class SpeechStarted(_Fields):
    TYPE: ClassVar[str] = "speech.started"
    turn_id: int


@dataclass(frozen=True, slots=True)
class TurnContinued(_Fields):
    """The user went on after the end of this turn: its reply so far is void."""

    TYPE: ClassVar[str] = "turn.continued"
    turn_id: int


@dataclass(frozen=True, slots=True)
class TranscriptPartial(_Fields):
    TYPE: ClassVar[str] = "transcript.partial"
    turn_id: int
    committed: str
    tentative: str


@dataclass(frozen=True, slots=True)
class TranscriptFinal(_Fields):
    TYPE: ClassVar[str] = "transcript.final"
    turn_id: int
    text: str


@dataclass(frozen=True, slots=True)
class AssistantText(_Fields):
    TYPE: ClassVar[str] = "assistant.text"
    turn_id: int
    delta: str


@dataclass(frozen=True, slots=True)
class AssistantAudio(_Fields):
    """Header: the next binary frame is ``samples`` samples of reply audio for ``turn_id``."""

    TYPE: ClassVar[str] = "assistant.audio"
    turn_id: int
    samples: int


@dataclass(frozen=True, slots=True)
class AudioClear(_Fields):
    """Barge-in: drop every queued sample of this turn now."""

    TYPE: ClassVar[str] = "audio.clear"
    turn_id: int


@dataclass(frozen=True, slots=True)
class ReplyResumed(_Fields):
    TYPE: ClassVar[str] = "reply.resumed"
    turn_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class ReplyInterrupted(_Fields):
    TYPE: ClassVar[str] = "reply.interrupted"
    turn_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class TurnLatency(_Fields):
    """The turn is over: where its time went (``record.marks_ns``: ns since ``ready``)."""

    TYPE: ClassVar[str] = "turn.latency"
    turn_id: int
    record: TurnRecord


@dataclass(frozen=True, slots=True)
class BudgetExceeded(_Fields):
    TYPE: ClassVar[str] = "budget.exceeded"
    turn_id: int
    stage: str
    duration_ms: float
    budget_ms: float


@dataclass(frozen=True, slots=True)
class TurnFailed(_Fields):
    TYPE: ClassVar[str] = "turn.failed"
    turn_id: int
    stage: str
    message: str
    retryable: bool


@dataclass(frozen=True, slots=True)
class ToolCalled(_Fields):
    """The LLM called a server-side tool (``arguments``: JSON text as the model wrote it,
    not necessarily valid); its ``tool.result`` follows."""

    TYPE: ClassVar[str] = "tool.call"
    turn_id: int
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolReturned(_Fields):
    """A server-side tool's call ended: ``output`` is what the LLM is told; ``error`` is
    None if the tool returned, else why not (its failure, a timeout, malformed
    arguments, or "cancelled: ..." by the user's interruption)."""

    TYPE: ClassVar[str] = "tool.result"
    turn_id: int
    call_id: str
    name: str
    output: str
    error: str | None


@dataclass(frozen=True, slots=True)
class ErrorReported(_Fields):
    """The client's last message was not usable (``code``: a wire error code, e.g. ``bad_field``)."""

    TYPE: ClassVar[str] = "error"
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Unknown(Message):
    """A message of a type this client does not know (from a newer server): ignore it."""

    type: str
    #: the whole JSON object, ``type`` included
    data: Mapping[str, Any]

    def to_json(self) -> Json:
        return dict(self.data)


KnownMessage = (
    Ready
    | SpeechStarted
    | TurnContinued
    | TranscriptPartial
    | TranscriptFinal
    | AssistantText
    | AssistantAudio
    | AudioClear
    | ReplyResumed
    | ReplyInterrupted
    | TurnLatency
    | BudgetExceeded
    | TurnFailed
    | ToolCalled
    | ToolReturned
    | ErrorReported
)
ServerMessage = KnownMessage | Unknown

KNOWN: tuple[type[KnownMessage], ...] = (
    Ready,
    SpeechStarted,
    TurnContinued,
    TranscriptPartial,
    TranscriptFinal,
    AssistantText,
    AssistantAudio,
    AudioClear,
    ReplyResumed,
    ReplyInterrupted,
    TurnLatency,
    BudgetExceeded,
    TurnFailed,
    ToolCalled,
    ToolReturned,
    ErrorReported,
)


# ---------------------------------------------------------------- parsing


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("an integer")
    return value


def _float(value: object) -> float:
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer of 400 digits
        number = math.nan
    if not math.isfinite(number):
        raise TypeError("a finite number")
    return number


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("a string")
    return value


def _opt_str(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError("a string or null")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError("true or false")
    return value


def _float_map(value: object) -> dict[str, float]:
    if not isinstance(value, dict):
        raise TypeError("an object of numbers")
    return {str(k): _float(v) for k, v in value.items()}


def _record(value: object) -> TurnRecord:
    if not isinstance(value, dict):
        raise TypeError("a ledger record object")
    try:
        record = TurnRecord.from_dict(value)
        record.as_dict()  # a record whose figures as_dict cannot write back (not numbers) is none
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise TypeError(f"a ledger record ({type(exc).__name__}: {exc})") from None
    return record


#: a field's reader, by its annotation
_READERS: dict[str, Callable[[object], object]] = {
    "int": _int,
    "float": _float,
    "str": _str,
    "str | None": _opt_str,
    "bool": _bool,
    "dict[str, float]": _float_map,
    "TurnRecord": _record,
}
#: per message type: its class and (attribute, wire key, reader) of each field
_SPECS: dict[str, tuple[type[KnownMessage], tuple[tuple[str, str, Callable[[object], object]], ...]]] = {
    cls.TYPE: (
        cls,
        tuple(
            (f.name, f.metadata.get("key", f.name), _READERS[str(f.type)]) for f in dataclasses.fields(cls)
        ),
    )
    for cls in KNOWN
}


def from_json(msg: Mapping[str, Any]) -> ServerMessage:
    """A decoded JSON object -> its message. Raises :class:`ServerMessageError`."""
    kind = msg.get("type")
    if not isinstance(kind, str):
        raise ServerMessageError(f"a server message needs a string 'type', got {type(kind).__name__}")
    spec = _SPECS.get(kind)
    if spec is None:
        return Unknown(kind, msg)
    cls, fields = spec
    values: dict[str, object] = {}
    for name, key, read in fields:
        if key not in msg:
            raise ServerMessageError(f"'{kind}' without '{key}'")
        try:
            values[name] = read(msg[key])
        except TypeError as exc:
            raise ServerMessageError(f"'{kind}': '{key}' must be {exc}") from None
    return cls(**values)  # type: ignore[arg-type]  # the readers gave each field its type


def parse_server_message(text: str) -> ServerMessage:
    """One text frame from the server -> its message. Raises :class:`ServerMessageError`."""
    try:
        msg = loads(text)
    except ValueError as exc:
        raise ServerMessageError(f"a text frame that is not JSON: {exc}") from None
    if not isinstance(msg, dict):
        raise ServerMessageError("a text frame that is not a JSON object")
    return from_json(msg)


# ---------------------------------------------------------------- a client's stream


@dataclass(frozen=True, slots=True, eq=False)
class AudioFrame:
    """A binary frame of reply audio, with the ``assistant.audio`` header that announced it."""

    header: AssistantAudio
    pcm: NDArray[np.int16]

    @property
    def turn_id(self) -> int:
        return self.header.turn_id


class ServerStream:
    """A client's view of the server's frames, in order (sans I/O): each text frame is
    parsed into its message, each binary frame is paired with the ``assistant.audio``
    header before it (a binary frame without one is None: ignore it)."""

    def __init__(self) -> None:
        self._header: AssistantAudio | None = None

    def text(self, data: str) -> ServerMessage:
        msg = parse_server_message(data)
        if isinstance(msg, AssistantAudio):
            self._header = msg
        return msg

    def binary(self, data: bytes) -> AudioFrame | None:
        header, self._header = self._header, None
        if header is None:
            return None
        return AudioFrame(header, np.frombuffer(data, dtype="<i2").astype(np.int16))
