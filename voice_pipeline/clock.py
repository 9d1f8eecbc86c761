"""Monotonic time helpers. Latency is measured with ``time.monotonic_ns()`` only."""

from __future__ import annotations

import time

now_ns = time.monotonic_ns


def ns_to_ms(ns: int) -> float:
    return ns / 1_000_000.0


def ms_to_ns(ms: float) -> int:
    return round(ms * 1_000_000)
