"""Task helpers that keep structured cancellation honest."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended.

    The task's own ``CancelledError`` (or error, which is logged) does not escape,
    but a cancellation of the caller while it waits does: unlike
    ``contextlib.suppress(CancelledError)`` around ``await task``, this never
    swallows the caller's own cancellation.
    """
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled() and task.exception() is not None:
        log.warning("task %s ended with an error", task.get_name(), exc_info=task.exception())
