"""The owner of every task of one session.

Each task a session starts -- a reply, the partial transcripts and evidence of an
utterance, a prefix-cache warm-up, a phrase synthesized ahead -- is spawned through
one :class:`SessionTasks`, which keeps it until it ends and logs a failure nobody
awaited. Closing the session cancels and awaits them all (:meth:`SessionTasks.cancel_all`,
then :meth:`SessionTasks.drain` for the ones spawned while those wound down).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class SessionTasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())

    async def cancel_all(self) -> None:
        """Cancel every task running now and wait for them to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def drain(self) -> None:
        """Wait until no task is left (including those spawned meanwhile)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
