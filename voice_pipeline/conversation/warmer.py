"""Keeps one session's known prompt prefix in the LLM's prefix cache (a thin adapter).

What to warm and when is :class:`llm.prefill.PrefillPlanner`'s decision; this runs the
``LLM.prefill`` request it asks for as a task of the session, aborts a stale one, and
stops the one in flight when a real request of the session starts (that request
computes the same tokens itself). The prefix it warms is the known start of the next
request: the context's prefix (the system prompt and the past turns: the session's
History, or a realtime session's conversation) and the committed words of the user's
utterance. The session calls :meth:`PrefixWarmer.warm` after the history changes, at
speech start and whenever the committed partial transcript grows, and
:meth:`PrefixWarmer.llm_starting` just before it starts an LLM request (the speculative
prefetch or the reply's own).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from llm.base import LLM, ChatMessage
from llm.prefill import PrefillPlanner, Prefix, StartPrefill

Spawn = Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]]


class PrefixWarmer:
    def __init__(
        self,
        llm: LLM,
        planner: PrefillPlanner,
        spawn: Spawn,
        known: Callable[[], Sequence[ChatMessage]],
        *,
        enabled: bool = True,
    ) -> None:
        """``known()``: the context's prefix as it stands."""
        self._llm = llm
        self._planner = planner
        self._spawn = spawn
        self._known = known
        self.enabled = enabled
        self._task: asyncio.Task[None] | None = None

    def prefix(self, committed: str = "") -> Prefix:
        """The known start of the next request, with the user's ``committed`` words."""
        return Prefix(tuple(self._known()), committed.strip())

    def warm(self, committed: str = "", *, idle: bool) -> None:
        """Warm the known prefix if the planner says it is worth it (``idle``: no LLM
        request of the session runs)."""
        if not self.enabled:
            return
        action = self._planner.want(self.prefix(committed), idle=idle)
        if isinstance(action, StartPrefill):
            if action.abort is not None:
                self._cancel()
            self._task = self._spawn(self._run(action), action.request_id)

    def served(self) -> None:
        """The reply just heard to its end left the known prefix in the cache by itself."""
        self._planner.served(self.prefix())

    def llm_starting(self) -> None:
        if self._planner.request_started() is not None:
            self._cancel()

    def _cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()  # cancelling prefill() aborts the engine's request

    async def _run(self, action: StartPrefill) -> None:
        try:
            result = await self._llm.prefill(list(action.messages), action.request_id)
        except asyncio.CancelledError:
            self._planner.cancelled(action.request_id)
            raise
        self._planner.finished(result)
