"""What the LLM sees on a realtime session: the conversation's items, as chat (pure).

The realtime conversation (:class:`~voice_pipeline.realtime.conversation.Conversation`,
the item store the client sees and edits) is the **one source of truth** for what
the LLM is asked with on ``/v1/realtime``. The session's own
:class:`~voice_pipeline.history.History` is not used there: :class:`RealtimeContext`
is the session's :class:`~voice_pipeline.history.Context` instead, and renders the
items by the same rules the History keeps on ``/ws``:

* the system message is the session's ``instructions`` (or a response's own);
* each message item with text becomes one chat message: user audio by its
  transcript, assistant audio by its transcript -- after an interruption or a
  client's ``conversation.item.truncate`` only the words heard, marked with a
  trailing :data:`~voice_pipeline.history.CUT_MARK` like an interrupted reply on ``/ws``;
* items without text (audio not transcribed yet, a reply cut before its first
  word was heard) are left out, and so are function calls and their outputs: the
  LLM interface carries chat text only, and the model served by default cannot
  call tools (``tools_unsupported``); such items are still stored and shown;
* the request is cut to ``dialogue.history_max_tokens`` by dropping the oldest whole
  turns (:func:`~voice_pipeline.history.fit_history`); the system message and the
  message being answered always stay.

For the reply to a spoken turn (``request(words, turn_id)``) the turn's own user item
is rendered with the words being answered -- the final transcript, or the speculative
one the LLM prefetch is started on -- so a prefetch asked before the item was
committed asks exactly what the final request will. :attr:`RealtimeContext.version`
changes whenever anything else the request holds changes (the connection calls
:meth:`RealtimeContext.changed`), so a prefetch made with an older conversation is
dropped. ``remember`` does nothing: the conversation already holds every item.
"""

from __future__ import annotations

from collections.abc import Sequence

from llm.base import ChatMessage
from voice_pipeline.history import (
    CUT_MARK,
    GENERATION_PROMPT_TOKENS,
    fit_history,
    message_tokens,
)
from voice_pipeline.realtime.conversation import Conversation, chat_messages
from voice_pipeline.realtime.items import InputAudio, Item, ItemStatus, Message, OutputAudio, Role

_KEEP_PROMPTS = 16  # prompt-token estimates kept for the latest turns


def _cut(item: Message) -> bool:
    """An assistant message the listener did not hear (or see) to the end."""
    if item.status is ItemStatus.INCOMPLETE:
        return True
    for part in item.content:
        if isinstance(part, OutputAudio):
            spoken = " ".join(c.text for c in part.clauses if c.text).split()
            if part.transcript.split() != spoken:
                return True
    return False


def render(instructions: str, items: Sequence[Item]) -> list[ChatMessage]:
    """The items as the chat the LLM reads (see the module docstring), not yet cut to a budget."""
    out: list[ChatMessage] = []
    for item in items:
        entries = chat_messages("", [item])
        entry = entries[0] if entries else None
        if not isinstance(entry, ChatMessage):
            continue  # no text, or a function call / output
        if isinstance(item, Message) and item.role is Role.ASSISTANT and _cut(item):
            entry = ChatMessage("assistant", entry.content + CUT_MARK)
        out.append(entry)
    return [ChatMessage("system", instructions), *out] if instructions else out


def fit_request(messages: Sequence[ChatMessage], max_tokens: int) -> list[ChatMessage]:
    """``messages`` (a leading system message, then the conversation) within ``max_tokens``:
    the oldest whole turns go first; the system message and a final user message stay."""
    system = messages[0] if messages and messages[0].role == "system" else None
    rest = list(messages[1:] if system is not None else messages)
    last = rest.pop() if rest and rest[-1].role == "user" else None
    head = [system] if system is not None else []
    tail = [last] if last is not None else []
    budget = max_tokens - sum(message_tokens(m) for m in (*head, *tail)) - GENERATION_PROMPT_TOKENS
    return [*head, *fit_history(rest, budget), *tail]


def prompt_tokens(messages: Sequence[ChatMessage]) -> int:
    """The request's prompt tokens, estimated without the tokenizer (the usage figure)."""
    return sum(message_tokens(m) for m in messages) + GENERATION_PROMPT_TOKENS


class RealtimeContext:
    """The realtime conversation as a session's :class:`~voice_pipeline.history.Context`."""

    def __init__(self, conversation: Conversation, instructions: str, max_tokens: int) -> None:
        self.conversation = conversation
        self._instructions = instructions
        self.max_tokens = max_tokens
        self.version = 0
        #: turn id -> the id of its user item (set as the turn's speech starts or is committed)
        self.turn_items: dict[int, str] = {}
        self._prompts: dict[int, int] = {}

    @property
    def instructions(self) -> str:
        return self._instructions

    @instructions.setter
    def instructions(self, text: str) -> None:
        if text != self._instructions:
            self._instructions = text
            self.changed()

    def changed(self) -> None:
        """Something a request holds has changed (an item, a truncation, the instructions)."""
        self.version += 1

    def messages_for(self, instructions: str, items: Sequence[Item]) -> list[ChatMessage]:
        """A request over ``items`` (a response's ``input``, or the whole conversation)."""
        return fit_request(render(instructions, items), self.max_tokens)

    def request(self, user_text: str, turn_id: int | None = None) -> list[ChatMessage]:
        items = list(self.conversation.items)
        own = self.turn_items.get(turn_id) if turn_id is not None else None
        words = Message(own or "", Role.USER, (InputAudio(user_text),))
        at = next((n for n, item in enumerate(items) if item.id == own), None)
        if at is None:
            items.append(words)
        else:
            items[at] = words
        messages = self.messages_for(self._instructions, items)
        if turn_id is not None:
            self._prompts[turn_id] = prompt_tokens(messages)
            while len(self._prompts) > _KEEP_PROMPTS:
                del self._prompts[min(self._prompts)]
        return messages

    def prefix(self) -> list[ChatMessage]:
        """The instructions and the conversation so far (kept warm in the prefix cache)."""
        return self.messages_for(self._instructions, self.conversation.items)

    def prompt_tokens(self, turn_id: int) -> int | None:
        """The estimated prompt tokens of the latest request made for ``turn_id``."""
        return self._prompts.get(turn_id)

    def remember(self, user_text: str, heard: str, *, cut: bool) -> None:
        """Nothing to do: the conversation holds the turn's items already."""
