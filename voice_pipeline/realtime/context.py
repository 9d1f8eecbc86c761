"""What the LLM sees on a realtime session: the conversation's items, as chat (pure).

The realtime conversation (:class:`~voice_pipeline.realtime.conversation.Conversation`,
the item store the client sees and edits) is the **one source of truth** for what
the LLM is asked with on ``/v1/realtime``. The session's own
:class:`~voice_pipeline.conversation.history.History` is not used there: :class:`RealtimeContext`
is the session's :class:`~voice_pipeline.conversation.history.Context` instead, and renders the
items by the same rules the History keeps on ``/ws``:

* the system message is the session's ``instructions`` (or a response's own);
* each message item with text becomes one chat message: user audio by its
  transcript, assistant audio by its transcript -- after an interruption or a
  client's ``conversation.item.truncate`` only the words heard, marked with a
  trailing :data:`~voice_pipeline.conversation.history.CUT_MARK` like an interrupted reply on ``/ws``;
* items without text (audio not transcribed yet, a reply cut before its first
  word was heard) are left out;
* a function call is an assistant message with ``tool_calls`` (joined to the words
  or the calls of the same reply right before it), a ``function_call_output`` a
  ``tool`` message with ``tool_call_id`` (:func:`~.conversation.item_message`);
* the request is cut to ``dialogue.history_max_tokens`` by dropping the oldest whole
  turns (:func:`~voice_pipeline.conversation.history.fit_history`; a call and its output are in the
  same turn); the system message and what is being answered always stay: the final
  user message, or -- for a response after function outputs -- the last turn, from its
  user message on (the calls and their outputs).

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
from voice_pipeline.conversation.history import (
    CUT_MARK,
    GENERATION_PROMPT_TOKENS,
    estimate_tokens,
    fit_history,
    message_tokens,
)
from voice_pipeline.conversation.steering import ReplyRequest
from voice_pipeline.realtime.conversation import Conversation, item_message, join_calls
from voice_pipeline.realtime.errors import RealtimeClientError
from voice_pipeline.realtime.items import InputAudio, Item, ItemStatus, Message, OutputAudio, Role
from voice_pipeline.realtime.response import ResponseSettings
from voice_pipeline.realtime.response_state import reply_options

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
        entry = item_message(item)
        if entry is None:
            continue
        if isinstance(item, Message) and item.role is Role.ASSISTANT and _cut(item):
            entry = ChatMessage("assistant", entry.content + CUT_MARK)
        out.append(entry)
    out = join_calls(out)
    return [ChatMessage("system", instructions), *out] if instructions else out


def chat_tokens(message: ChatMessage) -> int:
    """A message's tokens, estimated (its function calls' names and arguments too)."""
    calls = sum(estimate_tokens(c.name) + estimate_tokens(c.arguments) for c in message.tool_calls)
    return message_tokens(message) + calls


def _answered(rest: list[ChatMessage]) -> int:
    """Where the messages being answered start in ``rest``: the final user message, or
    after function outputs the last turn from its user message on (len: none)."""
    if not rest or rest[-1].role not in ("user", "tool"):
        return len(rest)
    at = len(rest) - 1
    while at > 0 and rest[at].role != "user":
        at -= 1
    return at


def fit_request(messages: Sequence[ChatMessage], max_tokens: int) -> list[ChatMessage]:
    """``messages`` (a leading system message, then the conversation) within ``max_tokens``:
    the oldest whole turns go first; the system message and what is answered stay."""
    system = messages[0] if messages and messages[0].role == "system" else None
    rest = list(messages[1:] if system is not None else messages)
    at = _answered(rest)
    rest, tail = rest[:at], rest[at:]
    head = [system] if system is not None else []
    budget = max_tokens - sum(chat_tokens(m) for m in (*head, *tail)) - GENERATION_PROMPT_TOKENS
    return [*head, *fit_history(rest, budget, chat_tokens), *tail]


def prompt_tokens(messages: Sequence[ChatMessage]) -> int:
    """The request's prompt tokens, estimated without the tokenizer (the usage figure)."""
    return sum(chat_tokens(m) for m in messages) + GENERATION_PROMPT_TOKENS


class RealtimeContext:
    """The realtime conversation as a session's :class:`~voice_pipeline.conversation.history.Context`."""

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

    def reply_request(self, settings: ResponseSettings) -> ReplyRequest:
        """What a response asks of the session, over the conversation as it stands now."""
        messages = self.messages_for(settings.instructions, self.conversation.context(settings.input))
        words = next((m.content for m in reversed(messages) if m.role == "user"), "")
        return ReplyRequest(tuple(messages), reply_options(settings), user_text=words, remember=False)

    def awaiting_words(self, settings: ResponseSettings) -> bool:
        """Some user audio a response reads is still being transcribed (a push-to-talk client
        commits and asks for a response at once: the words come a moment later)."""
        try:
            return self.conversation.awaiting_words(self.conversation.context(settings.input))
        except RealtimeClientError:  # an item it names is gone: its request says so
            return False

    def prefix(self) -> list[ChatMessage]:
        """The instructions and the conversation so far (kept warm in the prefix cache)."""
        return self.messages_for(self._instructions, self.conversation.items)

    def prompt_tokens(self, turn_id: int) -> int | None:
        """The estimated prompt tokens of the latest request made for ``turn_id``."""
        return self._prompts.get(turn_id)

    def remember(self, user_text: str, heard: str, *, cut: bool) -> None:
        """Nothing to do: the conversation holds the turn's items already."""
