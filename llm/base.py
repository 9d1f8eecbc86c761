"""The LLM stage interface: stream a chat reply, abort it on demand, report health.

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

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Role
    content: str


@dataclass(frozen=True, slots=True)
class LLMDelta:
    """New text of a streamed reply and how many tokens produced it."""

    text: str
    num_tokens: int


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
        if not self.failures:
            return LLMHealth(ok=True)
        return LLMHealth(False, self.reason, self.failures, round(self.wait_s(now_ns), 3))


class LLM(Protocol):
    def stream(self, messages: Sequence[ChatMessage], request_id: str) -> AsyncGenerator[LLMDelta, None]:
        """Stream the reply to ``messages`` (the system prompt included by the caller)."""
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
