"""Client events of the Realtime protocol, typed, and their parser (pure, no I/O).

One class per client event (commands, so imperative names), each with the
client's optional ``event_id``; :data:`ClientEvent` is their union, dispatched
with ``match``. :func:`parse_client_event` turns one WebSocket frame into an
event or a :class:`~voice_pipeline.realtime.errors.ProtocolError` in the
protocol's shape (carrying the client's ``event_id``), for every bad input:
bad JSON, not an object, unknown type, unknown / missing / ill-typed field, bad
base64, unsupported value, an event over ``max_bytes``. It never raises.

=====================================  ==========================
wire type                              class
=====================================  ==========================
``session.update``                     :class:`UpdateSession`
``input_audio_buffer.append``          :class:`AppendInputAudio`
``input_audio_buffer.commit``          :class:`CommitInputAudio`
``input_audio_buffer.clear``           :class:`ClearInputAudio`
``conversation.item.create``           :class:`CreateItem`
``conversation.item.retrieve``         :class:`RetrieveItem`
``conversation.item.truncate``         :class:`TruncateItem`
``conversation.item.delete``           :class:`DeleteItem`
``response.create``                    :class:`CreateResponse`
``response.cancel``                    :class:`CancelResponse`
``output_audio_buffer.clear``          :class:`ClearOutputAudio`
=====================================  ==========================
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from voice_pipeline.realtime.audio import AudioFormat
from voice_pipeline.realtime.errors import ErrorCode, ProtocolError, RealtimeClientError, quote, refuse
from voice_pipeline.realtime.items import MAX_ID_CHARS, Item, ItemReference, parse_item
from voice_pipeline.realtime.session_config import Modality
from voice_pipeline.realtime.session_parse import (
    parse_format,
    parse_max_tokens,
    parse_modalities,
    parse_session,
    parse_voice,
)
from voice_pipeline.realtime.session_update import UNSET, SessionUpdate, Unset, unsupported
from voice_pipeline.realtime.tools import FunctionTool, ToolChoice, parse_tool_choice, parse_tools
from voice_pipeline.realtime.wire import Fields, Json, decode_base64, load_object

#: largest client event accepted (1 MiB of base64 is ~16 s of 24 kHz PCM16)
DEFAULT_MAX_EVENT_BYTES: Final = 1 << 20
MAX_EVENT_ID_CHARS: Final = 512
MAX_METADATA_PAIRS: Final = 16


class ConversationMode(enum.StrEnum):
    #: the response reads the default conversation and its items are added to it
    AUTO = "auto"
    #: out of band: nothing is added to the conversation
    NONE = "none"


@dataclass(frozen=True, slots=True)
class UpdateSession:
    session: SessionUpdate
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class AppendInputAudio:
    #: raw bytes in the session's input format (a PCM16 chunk may end mid-sample)
    audio: bytes
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class CommitInputAudio:
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClearInputAudio:
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class CreateItem:
    item: Item
    #: None or "": append; ``"root"``: first; else after that item
    previous_item_id: str | None = None
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class RetrieveItem:
    item_id: str
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class TruncateItem:
    item_id: str
    content_index: int
    #: the audio heard, in ms of the item's audio (inclusive)
    audio_end_ms: int
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteItem:
    item_id: str
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseParams:
    """``response.create``'s ``response``: overrides for this response only (None = the session's)."""

    conversation: ConversationMode = ConversationMode.AUTO
    #: the context instead of the default conversation (None: the conversation; () : empty)
    input: tuple[Item | ItemReference, ...] | None = None
    instructions: str | None = None
    output_modality: Modality | None = None
    #: UNSET: the session's; None: "inf"
    max_output_tokens: int | Unset | None = UNSET
    metadata: tuple[tuple[str, str], ...] | None = None
    tools: tuple[FunctionTool, ...] | None = None
    tool_choice: ToolChoice | None = None
    output_format: AudioFormat | None = None
    voice: str | None = None


@dataclass(frozen=True, slots=True)
class CreateResponse:
    response: ResponseParams = field(default_factory=ResponseParams)
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class CancelResponse:
    #: None: the response in progress in the default conversation
    response_id: str | None = None
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClearOutputAudio:
    event_id: str | None = None


ClientEvent = (
    UpdateSession
    | AppendInputAudio
    | CommitInputAudio
    | ClearInputAudio
    | CreateItem
    | RetrieveItem
    | TruncateItem
    | DeleteItem
    | CreateResponse
    | CancelResponse
    | ClearOutputAudio
)

# ---------------------------------------------------------------- parsing

_RESPONSE_KEYS = frozenset(
    {
        "audio",
        "conversation",
        "input",
        "instructions",
        "max_output_tokens",
        "metadata",
        "output_modalities",
        "parallel_tool_calls",
        "prompt",
        "reasoning",
        "tool_choice",
        "tools",
    }
)
_COMMON = frozenset({"type", "event_id"})


def _id(f: Fields, key: str) -> str:
    return f.required_text(key, max_chars=MAX_ID_CHARS)


def _metadata(f: Fields) -> tuple[tuple[str, str], ...] | None:
    meta = f.get("metadata")
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise f.wrong_type("metadata", "an object of strings")
    if len(meta) > MAX_METADATA_PAIRS:
        raise refuse(
            ErrorCode.INVALID_VALUE, f"at most {MAX_METADATA_PAIRS} metadata pairs", f.param("metadata")
        )
    m = Fields(meta, f.param("metadata"), frozenset(meta))
    pairs = []
    for key in meta:
        if len(key) > 64:
            raise refuse(ErrorCode.INVALID_VALUE, "metadata keys are at most 64 characters", m.param(key))
        pairs.append((key, m.text(key, required=True, max_chars=512) or ""))
    return tuple(pairs)


def parse_response_params(f: Fields) -> ResponseParams:
    r = f.obj("response", _RESPONSE_KEYS)
    if r is None:
        return ResponseParams()
    conversation = r.get("conversation")
    if conversation not in (None, "auto", "none"):
        if not isinstance(conversation, str):
            raise r.wrong_type("conversation", 'a string ("auto" or "none")')
        raise unsupported(r.param("conversation"), 'only the conversations "auto" and "none" exist here')
    inputs = r.array("input", max_items=512)
    items = None
    if inputs is not None:
        items = tuple(
            parse_item(v, f"{r.param('input')}[{i}]", references=True) for i, v in enumerate(inputs)
        )
    for key, what in (("prompt", "prompt templates"), ("reasoning", "reasoning settings")):
        if r.get(key) is not None:
            r.obj(key, frozenset({"id", "variables", "version", "effort"}))
            raise unsupported(r.param(key), f"{what} are not supported")
    r.boolean("parallel_tool_calls")
    fmt: AudioFormat | Unset = UNSET
    voice: str | Unset = UNSET
    audio = r.obj("audio", frozenset({"output"}))
    output = audio.obj("output", frozenset({"format", "voice"})) if audio is not None else None
    if output is not None:
        fmt = parse_format(output, "format")
        voice = parse_voice(output)
    modality = parse_modalities(r)
    return ResponseParams(
        conversation=ConversationMode(conversation or "auto"),
        input=items,
        instructions=r.text("instructions"),
        output_modality=None if isinstance(modality, Unset) else modality,
        max_output_tokens=parse_max_tokens(r),
        metadata=_metadata(r),
        tools=parse_tools(r),
        tool_choice=parse_tool_choice(r),
        output_format=None if isinstance(fmt, Unset) else fmt,
        voice=None if isinstance(voice, Unset) else voice,
    )


def _previous(f: Fields) -> str | None:
    return f.text("previous_item_id", max_chars=MAX_ID_CHARS)


def _truncate(f: Fields, eid: str | None) -> TruncateItem:
    content_index = f.integer("content_index", required=True, low=0, high=1024)
    audio_end_ms = f.integer("audio_end_ms", required=True, low=0, high=2**31)
    assert content_index is not None and audio_end_ms is not None
    return TruncateItem(_id(f, "item_id"), content_index, audio_end_ms, eid)


def _create_item(f: Fields, eid: str | None) -> CreateItem:
    if not f.has("item"):
        raise refuse(ErrorCode.MISSING_PARAMETER, "missing required parameter 'item'", "item")
    item = parse_item(f.get("item"), "item")
    assert not isinstance(item, ItemReference)
    return CreateItem(item, _previous(f), eid)


def _append(f: Fields, eid: str | None) -> AppendInputAudio:
    return AppendInputAudio(decode_base64(f.required_text("audio", max_chars=2**31), "audio"), eid)


def _session(f: Fields, eid: str | None) -> UpdateSession:
    if not f.has("session"):
        raise refuse(ErrorCode.MISSING_PARAMETER, "missing required parameter 'session'", "session")
    return UpdateSession(parse_session(f.get("session")), eid)


_Parser = Callable[[Fields, "str | None"], ClientEvent]
#: wire type -> (the event's keys besides type and event_id, its parser)
_EVENTS: Final[dict[str, tuple[frozenset[str], _Parser]]] = {
    "session.update": (frozenset({"session"}), _session),
    "input_audio_buffer.append": (frozenset({"audio"}), _append),
    "input_audio_buffer.commit": (frozenset(), lambda f, eid: CommitInputAudio(eid)),
    "input_audio_buffer.clear": (frozenset(), lambda f, eid: ClearInputAudio(eid)),
    "conversation.item.create": (frozenset({"item", "previous_item_id"}), _create_item),
    "conversation.item.retrieve": (
        frozenset({"item_id"}),
        lambda f, eid: RetrieveItem(_id(f, "item_id"), eid),
    ),
    "conversation.item.truncate": (frozenset({"item_id", "content_index", "audio_end_ms"}), _truncate),
    "conversation.item.delete": (frozenset({"item_id"}), lambda f, eid: DeleteItem(_id(f, "item_id"), eid)),
    "response.create": (
        frozenset({"response"}),
        lambda f, eid: CreateResponse(parse_response_params(f), eid),
    ),
    "response.cancel": (
        frozenset({"response_id"}),
        lambda f, eid: CancelResponse(f.text("response_id", max_chars=MAX_ID_CHARS), eid),
    ),
    "output_audio_buffer.clear": (frozenset(), lambda f, eid: ClearOutputAudio(eid)),
}
KNOWN_TYPES: Final = tuple(_EVENTS)


def _event_id(msg: Json) -> str | None:
    """The client's event_id, if it is one that can be echoed back (else it is refused)."""
    eid = msg.get("event_id")
    if eid is None:
        return None
    if not isinstance(eid, str):
        raise refuse(ErrorCode.INVALID_TYPE, "'event_id' must be a string", "event_id")
    if len(eid) > MAX_EVENT_ID_CHARS:
        raise refuse(
            ErrorCode.INVALID_VALUE, f"'event_id' is over {MAX_EVENT_ID_CHARS} characters", "event_id"
        )
    return Fields({"event_id": eid}, "", frozenset({"event_id"})).text("event_id")


def parse_client_event(
    frame: str | bytes, *, max_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> ClientEvent | ProtocolError:
    """One frame -> the client event, or the error to send back. Never raises."""
    eid: str | None = None
    try:
        msg = load_object(frame, max_bytes)
        eid = _event_id(msg)
        kind = msg.get("type")
        if not isinstance(kind, str) or kind not in _EVENTS:
            if kind is None:
                raise refuse(ErrorCode.MISSING_PARAMETER, "missing required parameter 'type'", "type")
            raise refuse(
                ErrorCode.UNKNOWN_EVENT_TYPE,
                f"unknown event type {quote(kind)}; known: {', '.join(KNOWN_TYPES)}",
                "type",
            )
        keys, parse = _EVENTS[kind]
        return parse(Fields(msg, "", keys | _COMMON), eid)
    except RealtimeClientError as exc:
        return exc.error.for_event(eid)
    except RecursionError:  # belt and braces: nesting is bounded by load_object
        return ProtocolError(ErrorCode.INVALID_EVENT, "the event is nested too deep", event_id=eid)
