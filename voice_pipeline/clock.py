"""Monotonic time helpers. Latency is measured with ``time.monotonic_ns()`` only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

now_ns = time.monotonic_ns


def ns_to_ms(ns: int) -> float:
    return ns / 1_000_000.0


def ms_to_ns(ms: float) -> int:
    return round(ms * 1_000_000)


async def sleep_until(t_ns: int, clock: Callable[[], int] = now_ns) -> None:
    """Wait until ``clock()`` reaches ``t_ns`` (``clock``: monotonic ns on the real timeline)."""
    await asyncio.sleep(max(0.0, (t_ns - clock()) / 1e9))
