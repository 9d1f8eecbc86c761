"""Wait until the listener has played a turn out: the pure deadline and its thin loop."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from voice_pipeline.clock import now_ns

#: the shortest wait of :func:`drain_until` between two looks
MIN_WAIT_S = 0.01


class Drained(enum.Enum):
    """How :func:`drain_until` ended."""

    PLAYED = "played"  # the listener has played it all
    TIMED_OUT = "timed_out"  # not confirmed within the audio's duration plus the grace
    CLOSED = "closed"  # the connection is gone


@dataclass(slots=True)
class DrainDeadline:
    """When to stop waiting for a listener to play a turn out (pure; times in ns)."""

    rate_hz: int
    grace_s: float
    #: set at the first look: then + the unplayed audio's duration + ``grace_s``
    deadline_ns: int | None = None

    def step(self, now_ns: int, unplayed: int) -> Drained | float:
        """``PLAYED`` once nothing is unplayed, ``TIMED_OUT`` at the deadline, else the
        seconds to wait before looking again: until the audio should have played, at most
        to the deadline, at least :data:`MIN_WAIT_S`."""
        if unplayed <= 0:
            return Drained.PLAYED
        left_s = unplayed / self.rate_hz
        if self.deadline_ns is None:
            self.deadline_ns = now_ns + round((left_s + self.grace_s) * 1e9)
        if now_ns >= self.deadline_ns:
            return Drained.TIMED_OUT
        return max(MIN_WAIT_S, min(left_s, (self.deadline_ns - now_ns) / 1e9))


async def drain_until(
    unplayed: Callable[[int], int],
    changed: Callable[[float], Awaitable[None]],
    *,
    closed: Callable[[], bool],
    rate_hz: int,
    grace_s: float,
    clock: Callable[[], int] = now_ns,
) -> Drained:
    """Wait until ``unplayed(now)`` (samples at ``rate_hz`` sent but not played) is 0, at
    most its duration plus ``grace_s`` (a listener that stopped playing or confirming),
    or until ``closed()``. ``changed(timeout_s)`` returns when something may have changed
    (audio sent, a report or mark, a clear), or after ``timeout_s``."""
    deadline = DrainDeadline(rate_hz, grace_s)
    while not closed():
        now = clock()
        step = deadline.step(now, unplayed(now))
        if isinstance(step, Drained):
            return step
        await changed(step)
    return Drained.CLOSED
