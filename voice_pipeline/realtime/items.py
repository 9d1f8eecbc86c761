"""Conversation items of the Realtime protocol: typed, parsed from clients, serialized back.

An item is a :class:`Message` (role system / user / assistant, with content
parts), a :class:`FunctionCall` or a :class:`FunctionCallOutput`. Parts are
:class:`InputText` and :class:`InputAudio` (user; system messages hold text
only), :class:`OutputText` and :class:`OutputAudio` (assistant). An assistant's
audio part keeps the clauses it spoke with their lengths, so truncation can cut
its transcript to what the listener heard; audio data itself is never kept
(``conversation.item.retrieved`` carries transcripts, not audio).

:func:`parse_item` reads the ``item`` of ``conversation.item.create`` (and the
``input`` entries of ``response.create``, where :class:`ItemReference` is also
allowed); :func:`item_json` is the item as server events carry it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

from voice_pipeline.conversation.heard import SpokenClause
from voice_pipeline.realtime.errors import ErrorCode, quote, refuse
from voice_pipeline.realtime.wire import Fields, Json, decode_base64, element

#: ``id`` of an item the client sent without one: the conversation assigns it
NO_ID: Final = ""
#: ``previous_item_id`` that puts a new item first
ROOT: Final = "root"
MAX_ID_CHARS: Final = 64
MAX_PARTS: Final = 32


class Role(enum.StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class ItemStatus(enum.StrEnum):
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    IN_PROGRESS = "in_progress"


@dataclass(frozen=True, slots=True)
class InputText:
    text: str


@dataclass(frozen=True, slots=True)
class InputAudio:
    #: None until the audio is transcribed (or when transcription failed)
    transcript: str | None = None
    #: audio a client sent with ``conversation.item.create`` (in the session's input
    #: format), to be transcribed; the conversation never keeps it
    audio: bytes = b""


@dataclass(frozen=True, slots=True)
class OutputText:
    text: str


@dataclass(frozen=True, slots=True)
class OutputAudio:
    #: what the item says: all that was spoken, or after a truncation the words heard
    transcript: str
    #: all that was spoken, clause by clause, with each clause's length in samples at
    #: ``rate_hz`` (a truncation keeps them, so a later one may move the cut either way)
    clauses: tuple[SpokenClause, ...] = ()
    rate_hz: int = 24000

    @property
    def samples(self) -> int:
        return sum(c.samples for c in self.clauses)

    @property
    def duration_ms(self) -> int:
        return self.samples * 1000 // self.rate_hz


Content = InputText | InputAudio | OutputText | OutputAudio


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    role: Role
    content: tuple[Content, ...]
    status: ItemStatus = ItemStatus.COMPLETED


@dataclass(frozen=True, slots=True)
class FunctionCall:
    id: str
    call_id: str
    name: str
    #: the arguments as a JSON text (as the model wrote it)
    arguments: str
    status: ItemStatus = ItemStatus.COMPLETED


@dataclass(frozen=True, slots=True)
class FunctionCallOutput:
    id: str
    call_id: str
    output: str
    status: ItemStatus = ItemStatus.COMPLETED


Item = Message | FunctionCall | FunctionCallOutput


@dataclass(frozen=True, slots=True)
class ItemReference:
    """An existing item named in the ``input`` of ``response.create``."""

    id: str


def untranscribed_audio(item: Item) -> list[tuple[int, bytes]]:
    """A user message's audio parts sent without a transcript: (content index, audio)."""
    if not isinstance(item, Message) or item.role is not Role.USER:
        return []
    return [
        (n, p.audio)
        for n, p in enumerate(item.content)
        if isinstance(p, InputAudio) and p.audio and p.transcript is None
    ]


# ---------------------------------------------------------------- client -> server

_ITEM_COMMON = frozenset({"type", "id", "object", "status"})
_MESSAGE_KEYS = _ITEM_COMMON | {"role", "content"}
_CALL_KEYS = _ITEM_COMMON | {"call_id", "name", "arguments"}
_OUTPUT_KEYS = _ITEM_COMMON | {"call_id", "output"}
_PART_KEYS = {
    Role.SYSTEM: frozenset({"type", "text"}),
    Role.USER: frozenset({"type", "text", "audio", "transcript", "image_url", "detail"}),
    Role.ASSISTANT: frozenset({"type", "text", "audio", "transcript"}),
}
_MCP_TYPES = ("mcp_approval_response", "mcp_list_tools", "mcp_call", "mcp_approval_request")
_ITEM_TYPES = ("message", "function_call", "function_call_output")


def _item_id(f: Fields, key: str = "id") -> str:
    value = f.text(key, max_chars=MAX_ID_CHARS)
    return NO_ID if value is None else value


def _part_type(part: Fields, role: Role) -> str:
    """The part's ``type``; the SDK lets a client leave it out, so infer it from the fields."""
    kind = part.text("type")
    if kind is not None:
        return kind
    if role is Role.SYSTEM:
        return "input_text"
    if role is Role.USER:
        for key, inferred in (("image_url", "input_image"), ("audio", "input_audio"), ("text", "input_text")):
            if part.has(key):
                return inferred
    elif part.has("text"):
        return "output_text"
    elif part.has("audio") or part.has("transcript"):
        return "output_audio"
    raise refuse(ErrorCode.INVALID_VALUE, f"'{part.path}' needs a 'type'", part.param("type"))


def _part(value: Any, path: str, role: Role) -> Content:
    part = element(value, path, _PART_KEYS[role])
    kind = _part_type(part, role)
    match role, kind:
        case ((Role.SYSTEM | Role.USER), "input_text"):
            return InputText(part.required_text("text"))
        case Role.USER, "input_audio":
            audio = part.text("audio", max_chars=2**31)
            data = decode_base64(audio, part.param("audio")) if audio else b""
            transcript = part.text("transcript")
            if not data and transcript is None:
                raise refuse(
                    ErrorCode.INVALID_VALUE, f"'{path}' needs 'audio' (base64) or a 'transcript'", path
                )
            return InputAudio(transcript, data)
        case Role.USER, "input_image":
            raise refuse(
                ErrorCode.UNSUPPORTED, "image input is not supported: the model here reads text", path
            )
        case Role.ASSISTANT, "output_text":
            return OutputText(part.required_text("text"))
        case Role.ASSISTANT, "output_audio":
            raise refuse(
                ErrorCode.UNSUPPORTED,
                "assistant audio cannot be added by the client; send the text as 'output_text'",
                path,
            )
    allowed = {
        Role.SYSTEM: "input_text",
        Role.USER: "input_text, input_audio",
        Role.ASSISTANT: "output_text",
    }[role]
    raise refuse(
        ErrorCode.INVALID_VALUE,
        f"invalid content type {quote(kind)} for a {role} message at '{path}'; supported: {allowed}",
        part.param("type"),
    )


def _message(f: Fields) -> Message:
    role = Role(f.required_choice("role", tuple(Role)))
    parts = f.array("content", required=True, max_items=MAX_PARTS)
    assert parts is not None
    content = tuple(_part(p, f"{f.param('content')}[{i}]", role) for i, p in enumerate(parts))
    return Message(_item_id(f), role, content)


def parse_item(value: Any, path: str, *, references: bool = False) -> Item | ItemReference:
    """A client's item. ``references``: ``{"type": "item_reference", "id": ...}`` is allowed too."""
    if references and isinstance(value, dict) and value.get("type") == "item_reference":
        ref = element(value, path, frozenset({"type", "id"}))
        return ItemReference(ref.required_text("id", max_chars=MAX_ID_CHARS))
    kind = element(value, path, frozenset(value) if isinstance(value, dict) else frozenset()).required_text(
        "type"
    )
    if kind in _MCP_TYPES:
        raise refuse(ErrorCode.UNSUPPORTED, "MCP items are not supported by this server", f"{path}.type")
    if kind not in _ITEM_TYPES:
        raise refuse(
            ErrorCode.INVALID_VALUE,
            f"invalid item type {quote(kind)}; supported: {', '.join(_ITEM_TYPES)}",
            f"{path}.type",
        )
    known = {"message": _MESSAGE_KEYS, "function_call": _CALL_KEYS, "function_call_output": _OUTPUT_KEYS}
    f = Fields(value, path, known[kind])
    if f.get("object") not in (None, "realtime.item"):
        raise refuse(ErrorCode.INVALID_VALUE, "'object' must be \"realtime.item\"", f.param("object"))
    f.choice("status", tuple(ItemStatus))  # accepted and ignored: the server sets the status
    match kind:
        case "message":
            return _message(f)
        case "function_call":
            return FunctionCall(
                _item_id(f),
                _item_id(f, "call_id"),
                f.required_text("name", max_chars=256),
                f.required_text("arguments"),
            )
        case _:
            return FunctionCallOutput(
                _item_id(f), f.required_text("call_id", max_chars=MAX_ID_CHARS), f.required_text("output")
            )


# ---------------------------------------------------------------- server -> client


def content_json(part: Content) -> Json:
    match part:
        case InputText(text=text):
            return {"type": "input_text", "text": text}
        case InputAudio(transcript=transcript):
            return {"type": "input_audio", "transcript": transcript}
        case OutputText(text=text):
            return {"type": "output_text", "text": text}
        case OutputAudio(transcript=transcript):
            return {"type": "output_audio", "transcript": transcript}


def item_json(item: Item) -> Json:
    """The item as ``conversation.item.*`` and ``response.output_item.*`` carry it (no audio)."""
    base: Json = {"id": item.id, "object": "realtime.item", "status": str(item.status)}
    match item:
        case Message(role=role, content=content):
            return {
                **base,
                "type": "message",
                "role": str(role),
                "content": [content_json(p) for p in content],
            }
        case FunctionCall(call_id=call_id, name=name, arguments=arguments):
            return {**base, "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}
        case FunctionCallOutput(call_id=call_id, output=output):
            return {**base, "type": "function_call_output", "call_id": call_id, "output": output}
