"""Waiting on state that has no event to wait on (a server's sessions, a ledger, a transport's
counters): :func:`until` polls it, with a bound on real time so that a hang fails rather than waits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool], timeout_s: float = 10.0, *, what: str = "") -> None:
    """Return once ``condition()`` is true (polled every 10 ms); raise :class:`TimeoutError` naming
    ``what`` if it is not within ``timeout_s``. The bound catches a hang, not a slow or busy machine."""
    try:
        async with asyncio.timeout(timeout_s):
            while not condition():  # noqa: ASYNC110 -- polled state: nothing to wait on
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise TimeoutError(f"not within {timeout_s:g} s: {what or condition}") from None
