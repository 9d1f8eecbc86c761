"""The conversation the LLM sees: the system prompt and the past turns, within a token budget.

What enters it (the session decides *when*, :class:`History` decides *what*):

* a turn whose reply was heard in full: the user's message and the reply;
* an interrupted turn: the user's message and the words the listener heard of the
  reply, marked with a trailing "..." (nothing if nothing was heard);
* a failed turn: kept only if some of the reply's own words were heard; the apology
  and the filler never enter it;
* a turn whose reply called server-side tools: after the user's message, each round's
  assistant message with its calls and one ``tool`` message per call (its result; a
  call cancelled by the interruption says so; a call left to finish says it is still
  running until :meth:`History.resolve` puts its result there), then what was heard;
* nothing for an utterance that was only a backchannel, echo or noise spoken over a
  reply, and nothing for the first part of a continued turn (the whole utterance
  becomes one user message when it ends).

Budget: before each request, and after each turn for the list itself, the history is
cut to the most recent whole turns that fit ``dialogue.history_max_tokens`` together with
the system prompt (and the new user message) -- :func:`fit_history`, on token counts
estimated without the tokenizer (:func:`estimate_tokens`).

One source of truth per session: a session's requests come from its :class:`Context`.
On ``/ws``, the telephony edges and file mode that is :class:`History`, fed by the
session as each turn ends. On ``/v1/realtime`` it is the realtime conversation
(:class:`voice_pipeline.realtime.context.RealtimeContext` over the item store the
client sees and edits), rendered by the same rules; the session's ``remember`` is a
no-op there, because the conversation already holds every item.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

from llm.base import ChatMessage
from voice_pipeline.turntaking.bargein import InterruptionKind

#: chat-template tokens around each message (SmolLM2's ChatML: ``<|im_start|>role\n`` ...
#: ``<|im_end|>\n`` = 5 tokens, measured)
MESSAGE_OVERHEAD_TOKENS = 5
#: ``<|im_start|>assistant\n`` after the last message
GENERATION_PROMPT_TOKENS = 3
#: appended to a reply the listener did not hear to the end
CUT_MARK = "..."


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` for SmolLM2's tokenizer, estimated without it: one per digit
    (digits are split one by one) plus one per 4 other characters. Measured on 15
    conversational sentences: per sentence 0.8-1.5x the true count for text (digit-heavy
    text 0.8x), 1.03x over a whole conversation (284 estimated vs 275 true tokens)."""
    digits = sum(c.isdigit() for c in text)
    return digits + math.ceil((len(text) - digits) / 4)


def message_tokens(message: ChatMessage) -> int:
    calls = sum(estimate_tokens(c.name) + estimate_tokens(c.arguments) for c in message.tool_calls)
    return estimate_tokens(message.content) + calls + MESSAGE_OVERHEAD_TOKENS


def fit_history(
    history: Sequence[ChatMessage],
    budget_tokens: int,
    count: Callable[[ChatMessage], int] = message_tokens,
) -> list[ChatMessage]:
    """The most recent whole turns of ``history`` whose tokens add up to at most ``budget_tokens``.

    A turn is a user message and the messages after it up to the next user message
    (its assistant reply, if one was heard). Turns are dropped oldest first and never
    cut in half; messages before the first user message count as one turn.
    """
    turns: list[list[ChatMessage]] = []
    for message in history:
        if message.role == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    kept: list[list[ChatMessage]] = []
    used = 0
    for turn in reversed(turns):
        cost = sum(count(m) for m in turn)
        if used + cost > budget_tokens:
            break
        kept.append(turn)
        used += cost
    return [m for turn in reversed(kept) for m in turn]


def request_budget(max_tokens: int, system: ChatMessage, user: ChatMessage) -> int:
    """Tokens left for past turns in a request of at most ``max_tokens`` (may be < 0:
    then no past turn is sent, but the system prompt and the new message always are)."""
    return max_tokens - message_tokens(system) - message_tokens(user) - GENERATION_PROMPT_TOKENS


class Context(Protocol):
    """What a session asks the LLM with (see the module docstring)."""

    @property
    def version(self) -> int:
        """Changes whenever what a request would hold changes, but for the new message
        (a reply prefetched with an older version is not used)."""
        ...

    def request(self, user_text: str, turn_id: int | None = None) -> list[ChatMessage]:
        """The messages of a request answering ``user_text`` (the words of turn ``turn_id``)."""
        ...

    def remember(self, user_text: str, heard: str, *, cut: bool) -> None:
        """A turn ended: its words and what was heard of the reply (``cut``: not to the end)."""
        ...

    def prefix(self) -> list[ChatMessage]:
        """The part of the next request known before the user speaks (the system prompt and
        the past turns): what the session keeps warm in the LLM's prefix cache."""
        ...


class History:
    """One session's conversation. ``version`` changes whenever the messages do (a reply
    prefetched with an older history is not used)."""

    def __init__(self, system_prompt: str, max_tokens: int) -> None:
        self.system = ChatMessage("system", system_prompt)
        self.max_tokens = max_tokens
        self.messages: list[ChatMessage] = []
        self.version = 0

    def request(self, user_text: str, turn_id: int | None = None) -> list[ChatMessage]:
        """The messages of a request: system prompt, the past turns that fit, the new message."""
        user = ChatMessage("user", user_text)
        budget = request_budget(self.max_tokens, self.system, user)
        return [self.system, *fit_history(self.messages, budget), user]

    def prefix(self) -> list[ChatMessage]:
        """The part of the next request that is known before the user speaks."""
        budget = self.max_tokens - message_tokens(self.system) - GENERATION_PROMPT_TOKENS
        return [self.system, *fit_history(self.messages, budget)]

    def remember(self, user_text: str, heard: str, *, cut: bool, tools: Sequence[ChatMessage] = ()) -> None:
        """Add a finished turn: the user's message, the reply's tool calls and results
        (``tools``), and what was heard of the reply (``cut``: it was not heard to the end).
        Then keep the list within the token budget."""
        self.messages.append(ChatMessage("user", user_text))
        self.messages.extend(tools)
        if heard:
            self.messages.append(ChatMessage("assistant", heard + (CUT_MARK if cut else "")))
        self.messages = fit_history(self.messages, self.max_tokens - message_tokens(self.system))
        self.version += 1

    def resolve(self, call_id: str, output: str) -> None:
        """A call that went on after its turn was cut finished: its result replaces the
        ``tool`` message that said it was still running (nothing if that turn is gone)."""
        for i, m in enumerate(self.messages):
            if m.role == "tool" and m.tool_call_id == call_id:
                self.messages[i] = ChatMessage("tool", output, tool_call_id=call_id)
                self.version += 1


def admits(
    user_text: str, *, asked: bool, interruption: InterruptionKind | None, failed: bool, heard: str
) -> bool:
    """Does a finished turn enter the history? Only words the user meant for the assistant
    (an interruption by words, or none: not a backchannel, echo or noise over a reply), of a
    turn whose request asked to be remembered (``asked``: an out-of-band realtime reply is
    not), and not a failed turn of which nothing was heard (the user was never answered)."""
    if not user_text or not asked or interruption not in (None, InterruptionKind.WORDS):
        return False
    return not failed or bool(heard)


def remember(
    context: Context, user_text: str, heard: str, *, cut: bool, tools: Sequence[ChatMessage]
) -> None:
    """A turn ended: into ``context``, with its tool messages if it keeps them (a History; a
    realtime conversation holds its own items)."""
    if isinstance(context, History):
        context.remember(user_text, heard, cut=cut, tools=tools)
    else:
        context.remember(user_text, heard, cut=cut)
