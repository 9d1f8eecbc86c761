"""The LLM stage interface: stream a chat reply, abort it on demand.

Cancellation: abandoning the iterator (``aclose()``, or cancelling the task that
iterates it) or calling :meth:`LLM.abort` must abort the engine's request, so
that :meth:`LLM.unfinished_requests` drops back to zero at once.
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


class LLM(Protocol):
    def stream(self, messages: Sequence[ChatMessage], request_id: str) -> AsyncGenerator[LLMDelta, None]:
        """Stream the reply to ``messages`` (the system prompt included by the caller)."""
        ...

    async def abort(self, request_id: str) -> None: ...

    def unfinished_requests(self) -> int:
        """Requests the engine still holds (0 when idle; used to prove aborts work)."""
        ...

    async def aclose(self) -> None:
        """Idempotent."""
        ...
