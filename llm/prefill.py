"""Which prompt prefix to keep in the LLM's prefix cache, and when to warm it (pure).

vLLM keeps the KV blocks of finished requests in its prefix cache and reuses *whole*
blocks (``llm.kv_block_tokens`` tokens each) of any later prompt that starts with the same
tokens. So while the user speaks, a one-token request (:meth:`llm.base.LLM.prefill`) on
the prompt's known beginning -- system prompt and history, and the stable start of what
the user is saying -- leaves only the last few tokens to prefill when the turn ends.

A :class:`Prefix` is that beginning: closed messages, then optionally the open start of
the next user message (the committed words of a partial transcript). The
:class:`PrefillPlanner` decides, for one session, whether a prefill is worth issuing:

* not while the session's own LLM request runs (``idle=False``): on a small CPU a
  prefill beside a reply slows the reply down;
* not if the same prefix (or a longer one that contains it) is warm or being warmed;
* not unless it would add at least one whole block beyond what is known warm
  (estimated tokens; a block that is not full is not cached);
* a prefill in flight that the new prefix does not extend is stale: abort it first.

It never calls the engine; the session carries its commands out.

The session-side contract (what the runtime calls, and when)::

    # once per session; block_tokens = the engine's KV block size (engines.tuning.kv_block_tokens,
    # 32 on CPU; with a remote LLM the server's --block-size)
    planner = PrefillPlanner(block_tokens=block_tokens, tag=session_id)

    # (a) after the history changes (a reply was cut to what was heard, a turn was dropped;
    #     after a reply heard to its end call planner.served(prefix) instead: its own
    #     generation cached it), (b) at speech start, (c) whenever the committed partial transcript
    #     grows (LocalAgreement's stable prefix, whole words):
    prefix = conversation_prefix(cfg.dialogue.system_prompt, history, committed)  # committed "" at (a), (b)
    match planner.want(prefix, idle=<no LLM request of this session is running>):
        case StartPrefill(request_id=rid, messages=msgs, abort=stale):
            if stale is not None:
                cancel the task running that prefill (or: await llm.abort(stale))
            task = <session task group>.create_task(llm.prefill(msgs, rid))
            on completion: planner.finished(task.result())  # prefill never raises ...
            on cancellation: planner.cancelled(rid)          # ... except CancelledError
        case SkipPrefill():
            pass

    # (d) just before the session starts a real LLM request (speculative or final):
    stale = planner.request_started()
    if stale is not None:
        cancel that prefill task (the request computes the same tokens itself)

    # at session close: cancel any prefill task (cancelling aborts the engine's request)

The messages of the real request must be ``system prompt + history + the user message``
exactly as the prefix was built (same system prompt, same history objects' text), or the
tokens differ and nothing is reused. Measured (benchmarks/bench_prefix.py, README
"Prefix cache"): (a) gives nothing after a reply that ran to its end (its tokens are
cached already by its own generation) and helps after a cut one; (c) halves the first
token (AVX2 emulated, float32: 142 -> 76 ms; AVX-512 BF16, bf16: 68 -> 35 ms).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llm.base import ChatMessage, PrefillOutcome, PrefillResult

#: chat-template tokens around each message (ChatML: ``<|im_start|>role\\n`` ... ``<|im_end|>\\n``)
MESSAGE_OVERHEAD_TOKENS = 5


def estimate_tokens(text: str) -> int:
    """About one token per 4 characters, one per digit (SmolLM2's tokenizer splits digits)."""
    digits = sum(c.isdigit() for c in text)
    return digits + math.ceil((len(text) - digits) / 4)


def _starts_with_words(text: str, start: str) -> bool:
    """``text`` begins with ``start`` at a word boundary (so its tokens begin with start's)."""
    if not start:
        return True
    return text == start or (text.startswith(start) and text[len(start)] in " ,.;:!?")


@dataclass(frozen=True, slots=True)
class Prefix:
    """The start of a prompt: ``messages`` (closed), then the open start of a user message."""

    messages: tuple[ChatMessage, ...]
    open_user: str = ""

    def as_messages(self) -> list[ChatMessage]:
        """What to pass to :meth:`llm.base.LLM.prefill` (a final user message is left open)."""
        out = list(self.messages)
        if self.open_user:
            out.append(ChatMessage("user", self.open_user))
        return out

    def covers(self, other: Prefix) -> bool:
        """Whether ``other``'s prompt text is a prefix of this one's (so warming this one
        warms ``other`` too)."""
        n = len(other.messages)
        if self.messages[:n] != other.messages:
            return False
        if len(self.messages) == n:
            return _starts_with_words(self.open_user, other.open_user)
        if not other.open_user:
            return True
        nxt = self.messages[n]
        return nxt.role == "user" and _starts_with_words(nxt.content, other.open_user)

    def tokens(self, count: Callable[[str], int] = estimate_tokens) -> int:
        total = sum(count(m.content) + MESSAGE_OVERHEAD_TOKENS for m in self.messages)
        if self.open_user:
            total += count(self.open_user) + MESSAGE_OVERHEAD_TOKENS // 2 + 1  # no end-of-message
        return total


def conversation_prefix(system_prompt: str, history: Sequence[ChatMessage], partial: str = "") -> Prefix:
    """The prefix of the next request: system prompt + history (+ the committed partial)."""
    return Prefix((ChatMessage("system", system_prompt), *history), partial.strip())


class SkipReason(enum.StrEnum):
    BUSY = "busy"  # the session's own LLM request runs
    WARM = "warm"  # the prefix (or a longer one) is in the cache already
    IN_FLIGHT = "in_flight"  # ... or being put there
    NO_NEW_BLOCK = "no_new_block"  # it would not add a whole block


@dataclass(frozen=True, slots=True)
class StartPrefill:
    """Command: run ``LLM.prefill(messages, request_id)``; abort the stale one first."""

    request_id: str
    messages: tuple[ChatMessage, ...]
    prefix: Prefix
    #: a prefill in flight that this one replaces (its prefix is no longer wanted)
    abort: str | None = None


@dataclass(frozen=True, slots=True)
class SkipPrefill:
    reason: SkipReason


PrefillAction = StartPrefill | SkipPrefill


class PrefillPlanner:
    """One session's prefix-cache warming decisions (see the module docstring)."""

    def __init__(
        self, block_tokens: int, tag: str = "s", count: Callable[[str], int] = estimate_tokens
    ) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self._tag = tag
        self._count = count
        self._n = 0
        #: the longest prefix known to be in the cache (by a finished prefill)
        self.warm: Prefix | None = None
        #: (prefix, request id) of the prefill running now
        self.in_flight: tuple[Prefix, str] | None = None

    def _blocks(self, prefix: Prefix) -> int:
        return prefix.tokens(self._count) // self.block_tokens

    def want(self, prefix: Prefix, *, idle: bool) -> PrefillAction:
        """Should ``prefix`` be warmed now?"""
        if not idle:
            return SkipPrefill(SkipReason.BUSY)
        if self.warm is not None and self.warm.covers(prefix):
            return SkipPrefill(SkipReason.WARM)
        if self.in_flight is not None and self.in_flight[0].covers(prefix):
            return SkipPrefill(SkipReason.IN_FLIGHT)
        known = self.warm if self.warm is not None and prefix.covers(self.warm) else None
        if self._blocks(prefix) <= (self._blocks(known) if known is not None else 0):
            return SkipPrefill(SkipReason.NO_NEW_BLOCK)
        stale = self.in_flight[1] if self.in_flight is not None else None
        self._n += 1
        request_id = f"prefill-{self._tag}-{self._n}"
        self.in_flight = (prefix, request_id)
        return StartPrefill(request_id, tuple(prefix.as_messages()), prefix, stale)

    def served(self, prefix: Prefix) -> None:
        """A real request's prompt and the reply it generated are in the cache now: a reply
        heard to its end leaves ``prefix`` (system + history with that reply) warm by itself."""
        if self.warm is None or not self.warm.covers(prefix):
            self.warm = prefix

    def finished(self, result: PrefillResult) -> None:
        """A prefill ended (its result, whatever the outcome)."""
        if self.in_flight is None or self.in_flight[1] != result.request_id:
            return  # a stale one, already replaced
        prefix = self.in_flight[0]
        self.in_flight = None
        if result.outcome is PrefillOutcome.WARMED:
            self.warm = prefix

    def cancelled(self, request_id: str) -> None:
        """A prefill task was cancelled (no result)."""
        if self.in_flight is not None and self.in_flight[1] == request_id:
            self.in_flight = None

    def request_started(self) -> str | None:
        """The session starts a real request now: the prefill in flight (to abort), if any."""
        if self.in_flight is None:
            return None
        request_id = self.in_flight[1]
        self.in_flight = None
        return request_id
