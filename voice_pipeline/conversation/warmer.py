"""Keeps one session's known prompt prefix in the LLM's prefix cache (a thin adapter).

What to warm and when is :class:`llm.prefill.PrefillPlanner`'s decision; this runs the
``LLM.prefill`` request it asks for as a task of the session, aborts a stale one, and
stops the one in flight when a real request of the session starts (that request
computes the same tokens itself). The session calls :meth:`PrefixWarmer.warm` after the
history changes, at speech start and whenever the committed partial transcript grows,
and :meth:`PrefixWarmer.llm_starting` just before it starts an LLM request (the
speculative prefetch or the reply's own).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from llm.base import LLM
from llm.prefill import PrefillPlanner, Prefix, StartPrefill

Spawn = Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]]


class PrefixWarmer:
    def __init__(self, llm: LLM, planner: PrefillPlanner, spawn: Spawn, *, enabled: bool = True) -> None:
        self._llm = llm
        self._planner = planner
        self._spawn = spawn
        self.enabled = enabled
        self._task: asyncio.Task[None] | None = None

    def warm(self, prefix: Prefix, *, idle: bool) -> None:
        """Warm ``prefix`` if the planner says it is worth it (``idle``: no LLM request of the
        session runs)."""
        if not self.enabled:
            return
        action = self._planner.want(prefix, idle=idle)
        if isinstance(action, StartPrefill):
            if action.abort is not None:
                self._cancel()
            self._task = self._spawn(self._run(action), action.request_id)

    def served(self, prefix: Prefix) -> None:
        """The reply just heard to its end left ``prefix`` in the cache by itself."""
        self._planner.served(prefix)

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
