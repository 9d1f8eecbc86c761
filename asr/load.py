"""How busy one ASR engine is, over every session that shares it.

CTranslate2 runs one decode at a time, first come first served, so a partial decode that
one session queues delays the speculative or final decode another session's reply waits
for. :class:`asr.streaming.UtteranceTranscriber` counts its decodes here and starts a
partial only when the count is zero (``asr.partials_on_idle_engine``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

__all__ = ["EngineLoad"]

_T = TypeVar("_T")


class EngineLoad:
    """How many decodes are on one ASR engine now, over every session that shares it.

    Counted from the moment a decode is handed to its thread until the thread returns
    (a cancelled wait does not stop the thread, so it still counts). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decodes = 0

    @property
    def busy(self) -> bool:
        return self._decodes > 0

    def begin(self) -> None:
        with self._lock:
            self._decodes += 1

    def end(self) -> None:
        with self._lock:
            self._decodes = max(0, self._decodes - 1)

    async def run(self, executor: Executor | None, work: Callable[[], _T]) -> _T:
        """``work()`` in ``executor`` (None: the loop's default), counted from now until its
        thread returns."""

        def counted() -> _T:
            try:
                return work()
            finally:
                self.end()

        self.begin()
        try:
            future = asyncio.get_running_loop().run_in_executor(executor, counted)
        except BaseException:
            self.end()  # never handed to a thread
            raise
        return await future
