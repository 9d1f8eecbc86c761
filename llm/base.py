"""The LLM stage interface: stream a chat reply, abort it on demand, report health,
warm a prompt prefix ahead of time (:meth:`LLM.prefill`, see :mod:`llm.prefill`).

Cancellation: abandoning the iterator (``aclose()``, or cancelling the task that
iterates it) or calling :meth:`LLM.abort` must abort the engine's request, so
that :meth:`LLM.unfinished_requests` drops back to zero at once.

Health: :meth:`LLM.health` says whether the last request got an answer. Engines
keep it with the pure :class:`HealthTracker`, which also computes the retry
backoff: after a failure a remote engine refuses new requests at once (a
retryable :class:`~voice_pipeline.errors.EngineError`) for ``retry_initial_s``,
doubling per consecutive failure up to ``retry_max_s``; the first request after
the wait is a real attempt, and its success makes the engine healthy again.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call the model made (complete: its arguments as JSON text)."""

    call_id: str
    name: str
    #: the arguments as the model wrote them: JSON text, not necessarily valid
    arguments: str


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Role
    content: str
    #: an assistant message's function calls (its ``content`` may then be empty)
    tool_calls: tuple[ToolCall, ...] = ()
    #: a ``tool`` message: the call it answers (``content`` is the call's output)
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call: its name, what it does, its arguments' JSON schema."""

    name: str
    description: str
    #: the JSON schema of the arguments, as compact JSON text (kept immutable)
    parameters_json: str = '{"type":"object","properties":{}}'


class ToolMode(enum.StrEnum):
    AUTO = "auto"  # the model chooses: text or calls (needs a model that can call tools)
    NONE = "none"  # text only: the tools are not offered
    REQUIRED = "required"  # at least one call (structured outputs: any model)


@dataclass(frozen=True, slots=True)
class ToolOffer:
    """The tools of one request and how the model may use them (``tool_choice``)."""

    tools: tuple[ToolSpec, ...]
    mode: ToolMode = ToolMode.AUTO
    #: the one tool the model must call (a named ``tool_choice``; overrides ``mode``)
    function: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """New text of a function call being streamed. A reply's calls are told apart by
    ``index`` (0, 1, ... in the order the model wrote them); the first delta of a call
    carries its ``call_id`` and ``name``, later ones only more ``arguments`` text."""

    index: int
    call_id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True)
class LLMDelta:
    """New text of a streamed reply and how many tokens produced it.

    The first delta of a request also says how its prompt was served (None on later
    deltas, and where the engine does not report it). An engine that learns the cached
    count only at the end (a vLLM server puts it in its final usage chunk) repeats the
    first delta's figures with it then, on a delta with no text and no tokens.
    """

    text: str
    num_tokens: int
    #: tokens of the prompt (system prompt, history and the new message, chat template included)
    prompt_tokens: int | None = None
    #: ... of which came from the prefix cache (whole KV blocks only)
    cached_tokens: int | None = None
    #: request sent -> this first delta, ms: queueing + prefill of the uncached prompt tokens
    #: + the first sampled token, as the engine's caller saw it
    prefill_ms: float | None = None
    #: function calls streamed with this delta (only when the request offered tools)
    tool_calls: tuple[ToolCallDelta, ...] = ()


class PrefillOutcome(enum.StrEnum):
    WARMED = "warmed"  # the prompt ran: its whole KV blocks are in the prefix cache
    ABORTED = "aborted"  # abort() or close came first; nothing is known to be cached
    FAILED = "failed"  # the engine failed the request (logged, never raised: it only saves time)


@dataclass(frozen=True, slots=True)
class PrefillResult:
    """What :meth:`LLM.prefill` did."""

    request_id: str
    outcome: PrefillOutcome
    #: tokens of the prefix sent (0 if it never got that far)
    prompt_tokens: int
    #: ... of which were in the prefix cache already (None: the engine did not say)
    cached_tokens: int | None
    #: call -> done, ms
    elapsed_ms: float
    #: why it failed (outcome FAILED)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class LLMHealth:
    """What :meth:`LLM.health` reports (``/healthz`` shows it)."""

    ok: bool
    #: why not ok: the last failure's message
    reason: str | None = None
    #: consecutive failed requests
    failures: int = 0
    #: a new request is refused at once for this much longer (0 = it is tried)
    retry_in_s: float = 0.0


class HealthTracker:
    """Outcomes of an engine's requests -> health and the retry backoff (pure: no clock).

    Only failures that say something about the engine count (timeouts, refused or
    dropped connections, 5xx); a request the caller aborted, or one refused during
    the backoff, is neither a success nor a failure.
    """

    def __init__(self, retry_initial_s: float, retry_max_s: float) -> None:
        self._initial_s = retry_initial_s
        self._max_s = retry_max_s
        self.failures = 0
        self.reason: str | None = None
        self._retry_at_ns = 0

    def failed(self, now_ns: int, reason: str) -> None:
        self.failures += 1
        self.reason = reason
        delay_s = min(self._max_s, self._initial_s * 2 ** min(self.failures - 1, 30))
        self._retry_at_ns = now_ns + round(delay_s * 1e9)

    def succeeded(self) -> None:
        self.failures = 0
        self.reason = None
        self._retry_at_ns = 0

    def wait_s(self, now_ns: int) -> float:
        """Seconds before a new request may be tried (0 = now)."""
        return max(0.0, (self._retry_at_ns - now_ns) / 1e9) if self.failures else 0.0

    def health(self, now_ns: int) -> LLMHealth:
        """``retry_in_s`` is the wait in whole ms, rounded up: sleeping it out always outlasts
        the backoff (rounded to the nearest ms, a caller could wake 0.4 ms early and be refused)."""
        if not self.failures:
            return LLMHealth(ok=True)
        wait_ms = max(0, -((now_ns - self._retry_at_ns) // 1_000_000))  # ceil, in integers
        return LLMHealth(False, self.reason, self.failures, wait_ms / 1000)


class LLM(Protocol):
    def stream(
        self, messages: Sequence[ChatMessage], request_id: str, tools: ToolOffer | None = None
    ) -> AsyncGenerator[LLMDelta, None]:
        """Stream the reply to ``messages`` (the system prompt included by the caller).

        With ``tools`` the model may (``auto``) or must (``required``, a named function)
        call them: the calls stream as :attr:`LLMDelta.tool_calls`. An engine whose model
        cannot call tools raises a non-retryable ``EngineError`` for ``auto``."""
        ...

    async def prefill(self, messages: Sequence[ChatMessage], request_id: str) -> PrefillResult:
        """Put the prompt prefix ``messages`` into the engine's prefix cache (a one-token
        request on it), so a later :meth:`stream` whose prompt starts with it only prefills
        the rest. A final ``user`` message is left open (no end-of-message token), so it is
        a prefix of the same message grown longer; otherwise the prefix ends after the last
        message, without the assistant's generation prompt.

        Cancelling the call, or :meth:`abort` with ``request_id``, aborts the request
        (:meth:`unfinished_requests` drops at once). Never raises for an aborted or failed
        request (the outcome says so); a cancelled call re-raises ``CancelledError``."""
        ...

    async def abort(self, request_id: str) -> None: ...

    def unfinished_requests(self) -> int:
        """Requests the engine still holds (0 when idle; used to prove aborts work)."""
        ...

    def health(self) -> LLMHealth:
        """Whether the engine is answering (see the module docstring)."""
        ...

    async def aclose(self) -> None:
        """Idempotent."""
        ...
