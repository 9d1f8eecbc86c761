"""The Realtime conversation: items in order, addressed by id (pure).

:class:`Conversation` holds the default conversation's items. Its client-facing
methods (:meth:`~Conversation.create`, :meth:`~Conversation.retrieve`,
:meth:`~Conversation.delete`, :meth:`~Conversation.truncate`) carry out one
client event and return the server events that answer it, or raise
:class:`~voice_pipeline.realtime.errors.RealtimeClientError` (unknown item id,
duplicate id, an item that cannot be truncated, ...) and change nothing. The
sequencers use the lower-level :meth:`~Conversation.add` / :meth:`~Conversation.replace`.

Placement: ``previous_item_id`` None appends, ``"root"`` puts the item first,
an id puts it right after that item. At most ``max_items`` are kept: adding one
more drops the oldest, and the returned events include its
``conversation.item.deleted`` so a client's mirror of the conversation stays
in step.

Truncation (``conversation.item.truncate``) cuts an assistant audio part at
``audio_end_ms``, and its transcript to the words heard by then
(:func:`voice_pipeline.conversation.heard.heard_text` over the clauses it spoke), so the
next reply is not based on words the listener never heard.

:func:`chat_messages` renders items as the LLM's chat: system instructions
first, then one message per item (user audio by its transcript; a function call as
an assistant message with ``tool_calls`` -- a reply's parallel calls, and the words
said before them, as one message -- and a function's output as a ``tool`` message
with ``tool_call_id``; :func:`chat_json` writes them the way vLLM's OpenAI-compatible
chat API takes them).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from llm.base import ChatMessage, ToolCall
from llm.base import Role as ChatRole
from voice_pipeline.conversation.heard import heard_text
from voice_pipeline.realtime.errors import ErrorCode, RealtimeClientError, quote, refuse
from voice_pipeline.realtime.ids import IdKind, Ids
from voice_pipeline.realtime.items import (
    NO_ID,
    ROOT,
    FunctionCall,
    FunctionCallOutput,
    InputAudio,
    InputText,
    Item,
    ItemReference,
    Message,
    OutputAudio,
    OutputText,
    Role,
)
from voice_pipeline.realtime.server_events import (
    ItemAdded,
    ItemDeleted,
    ItemDone,
    ItemRetrieved,
    ItemTruncated,
    ServerEvent,
)

DEFAULT_MAX_ITEMS = 512


class ItemAction(enum.Enum):
    """The client event looking an item up: each has OpenAI's own not-found error code."""

    FIND = (ErrorCode.ITEM_NOT_FOUND, "Error")
    RETRIEVE = (ErrorCode.RETRIEVE_NOT_FOUND, "Error retrieving item")
    DELETE = (ErrorCode.DELETE_NOT_FOUND, "Error deleting item")
    TRUNCATE = (ErrorCode.TRUNCATE_NOT_FOUND, "Error truncating item")


def _not_found(item_id: str, param: str = "item_id", action: ItemAction = ItemAction.FIND) -> Exception:
    code, prefix = action.value
    return refuse(code, f"{prefix}: the item with id {quote(item_id)} does not exist.", param)


class Conversation:
    def __init__(self, ids: Ids, *, max_items: int = DEFAULT_MAX_ITEMS) -> None:
        self._ids = ids
        self.max_items = max_items
        self.id = ids.new(IdKind.CONVERSATION)
        self._items: list[Item] = []
        self._wordless: set[str] = set()  # items whose audio could not be transcribed

    # ------------------------------------------------------------ reading

    def awaiting_words(self, items: Sequence[Item]) -> bool:
        """Some user audio of ``items`` is still being transcribed: its words are to come."""
        return any(
            isinstance(p, InputAudio) and p.transcript is None
            for item in items
            if isinstance(item, Message) and item.id not in self._wordless
            for p in item.content
        )

    def no_words(self, item_id: str) -> None:
        """``item_id``'s audio could not be transcribed: its words will never come."""
        self._wordless.add(item_id)
        if len(self._wordless) > 4 * self.max_items:  # (ids of items long gone)
            self._wordless = {i for i in self._wordless if i in self}

    @property
    def items(self) -> tuple[Item, ...]:
        return tuple(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item_id: object) -> bool:
        return any(i.id == item_id for i in self._items)

    def _index(self, item_id: str, param: str = "item_id", action: ItemAction = ItemAction.FIND) -> int:
        for n, item in enumerate(self._items):
            if item.id == item_id:
                return n
        raise _not_found(item_id, param, action)

    def get(self, item_id: str, *, action: ItemAction = ItemAction.FIND) -> Item:
        """The item; RealtimeClientError if there is none, with the code of ``action``."""
        return self._items[self._index(item_id, action=action)]

    def previous_id(self, item_id: str) -> str | None:
        n = self._index(item_id)
        return self._items[n - 1].id if n else None

    @property
    def last_id(self) -> str | None:
        return self._items[-1].id if self._items else None

    def new_id(self, kind: IdKind = IdKind.ITEM) -> str:
        """A fresh id no item has (a client may have picked ids of the same shape)."""
        while True:
            new = self._ids.new(kind)
            if new not in self and not any(
                isinstance(i, FunctionCall) and i.call_id == new for i in self._items
            ):
                return new

    def context(self, refs: Sequence[Item | ItemReference] | None) -> tuple[Item, ...]:
        """The items a response reads: the conversation (None), or ``response.input``'s
        items with its references resolved."""
        if refs is None:
            return self.items
        out: list[Item] = []
        for n, ref in enumerate(refs):
            if isinstance(ref, ItemReference):
                try:
                    out.append(self.get(ref.id))
                except RealtimeClientError:
                    raise _not_found(ref.id, f"response.input[{n}].id") from None
            else:
                out.append(ref)
        return tuple(out)

    # ------------------------------------------------------------ changing (sequencers)

    def add(self, item: Item, previous_item_id: str | None = None) -> tuple[str | None, list[ServerEvent]]:
        """Insert ``item`` (its id must be new). Returns the id of the item now before it and
        the ``conversation.item.deleted`` of the oldest item if one had to go."""
        if item.id in self:
            raise refuse(ErrorCode.DUPLICATE_ITEM_ID, f"an item with id {quote(item.id)} exists", "item.id")
        if not previous_item_id:  # None, or "" (which the SDK's users send for "append")
            at = len(self._items)
        elif previous_item_id == ROOT:
            at = 0
        else:
            at = self._index(previous_item_id, "previous_item_id") + 1
        self._items.insert(at, item)
        evicted: list[ServerEvent] = []
        while len(self._items) > self.max_items:
            oldest = self._items.pop(1 if self._items[0] is item else 0)  # never the new item
            evicted.append(ItemDeleted(oldest.id))
        return self.previous_id(item.id), evicted

    def replace(self, item: Item) -> None:
        """The same item (same id, same place) with new content or status."""
        self._items[self._index(item.id)] = item

    def set_transcript(self, item_id: str, content_index: int, transcript: str) -> Item:
        """A user audio part's transcript, once the ASR has it. Returns the updated item."""
        item = self.get(item_id)
        if not isinstance(item, Message) or not 0 <= content_index < len(item.content):
            raise refuse(ErrorCode.INVALID_VALUE, f"item {quote(item_id)} has no content {content_index}")
        part = item.content[content_index]
        if not isinstance(part, InputAudio):
            raise refuse(
                ErrorCode.INVALID_VALUE, f"content {content_index} of {quote(item_id)} is not input audio"
            )
        content = list(item.content)
        content[content_index] = InputAudio(transcript)
        new = replace(item, content=tuple(content))
        self.replace(new)
        return new

    # ------------------------------------------------------------ client events

    def create(self, item: Item, previous_item_id: str | None = None) -> list[ServerEvent]:
        """``conversation.item.create``: the item gets its id (if it had none) and goes in;
        audio sent with it is not kept (transcribe it from the client event)."""
        if item.id == NO_ID:
            item = replace(item, id=self.new_id())
        match item:
            case FunctionCall(call_id=call_id) if call_id == NO_ID:
                item = replace(item, call_id=self.new_id(IdKind.CALL))
            case Message(content=content) if any(isinstance(p, InputAudio) and p.audio for p in content):
                parts = tuple(InputAudio(p.transcript) if isinstance(p, InputAudio) else p for p in content)
                item = replace(item, content=parts)
        previous, evicted = self.add(item, previous_item_id)
        return [*evicted, ItemAdded(item, previous), ItemDone(item, previous)]

    def retrieve(self, item_id: str) -> list[ServerEvent]:
        return [ItemRetrieved(self.get(item_id, action=ItemAction.RETRIEVE))]

    def delete(self, item_id: str) -> list[ServerEvent]:
        del self._items[self._index(item_id, action=ItemAction.DELETE)]
        return [ItemDeleted(item_id)]

    def truncate(self, item_id: str, content_index: int, audio_end_ms: int) -> list[ServerEvent]:
        """Cut an assistant audio part at ``audio_end_ms`` (ms of the item's audio), and its
        transcript to the words heard by then."""
        item = self.get(item_id, action=ItemAction.TRUNCATE)
        if not isinstance(item, Message) or item.role is not Role.ASSISTANT:
            raise refuse(ErrorCode.INVALID_VALUE, "only assistant messages can be truncated", "item_id")
        if not 0 <= content_index < len(item.content):
            raise refuse(
                ErrorCode.INVALID_VALUE,
                f"content_index {content_index}: the item has {len(item.content)} content part(s)",
                "content_index",
            )
        part = item.content[content_index]
        if not isinstance(part, OutputAudio):
            raise refuse(ErrorCode.INVALID_VALUE, "only audio content can be truncated", "content_index")
        if audio_end_ms > part.duration_ms:
            raise refuse(
                ErrorCode.INVALID_VALUE,
                f"audio_end_ms {audio_end_ms} is past the end of the item's audio ({part.duration_ms} ms)",
                "audio_end_ms",
            )
        heard = heard_text(part.clauses, audio_end_ms * part.rate_hz // 1000)
        cut = replace(part, transcript=heard)
        content = list(item.content)
        content[content_index] = cut
        self.replace(replace(item, content=tuple(content)))
        return [ItemTruncated(item_id, content_index, audio_end_ms)]


# ---------------------------------------------------------------- the LLM's view


_ROLES: dict[Role, ChatRole] = {Role.SYSTEM: "system", Role.USER: "user", Role.ASSISTANT: "assistant"}


def _text(part: InputText | InputAudio | OutputText | OutputAudio) -> str:
    match part:
        case InputText(text=text) | OutputText(text=text):
            return text
        case InputAudio(transcript=transcript):
            return transcript or ""
        case OutputAudio(transcript=transcript):
            return transcript


def item_message(item: Item) -> ChatMessage | None:
    """One item as a chat message (None: a message without any text)."""
    match item:
        case Message(role=role, content=content):
            text = " ".join(t for t in (_text(p).strip() for p in content) if t)
            return ChatMessage(_ROLES[role], text) if text else None
        case FunctionCall(call_id=call_id, name=name, arguments=arguments):
            return ChatMessage("assistant", "", tool_calls=(ToolCall(call_id, name, arguments),))
        case FunctionCallOutput(call_id=call_id, output=output):
            return ChatMessage("tool", output, tool_call_id=call_id)
    return None


def join_calls(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """A function call joins the assistant message right before it (the words the reply
    said, or the calls made with it): a reply's parallel calls are one message."""
    out: list[ChatMessage] = []
    for m in messages:
        prev = out[-1] if out else None
        if m.tool_calls and not m.content and prev is not None and prev.role == "assistant":
            out[-1] = replace(prev, tool_calls=prev.tool_calls + m.tool_calls)
        else:
            out.append(m)
    return out


def chat_messages(instructions: str, items: Sequence[Item]) -> list[ChatMessage]:
    """The chat the LLM reads: the instructions as the system message, then the items in
    order. Messages without any text (audio not transcribed yet, a reply cut before its first
    word was heard) are left out; function calls join the assistant message before them."""
    out = [ChatMessage("system", instructions)] if instructions else []
    return out + join_calls([m for m in map(item_message, items) if m is not None])


def chat_json(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The chat in the OpenAI chat-completions format vLLM's chat templates are given."""
    out: list[dict[str, Any]] = []
    for m in messages:
        entry: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            entry["content"] = m.content or None
            entry["tool_calls"] = [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
        if m.tool_call_id is not None:
            entry["tool_call_id"] = m.tool_call_id
        out.append(entry)
    return out
