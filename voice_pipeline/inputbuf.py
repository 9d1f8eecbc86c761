"""Recent microphone input with the time each chunk was captured.

Used for pre-roll (the start of a user turn), for mapping sample positions to
monotonic time (ledger marks), and for the echo check's microphone window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray


class InputHistory:
    def __init__(self, rate_hz: int, keep_s: float, clock: Callable[[], int]) -> None:
        self.rate_hz = rate_hz
        self._keep = int(keep_s * rate_hz)
        self._clock = clock
        self._chunks: deque[tuple[int, int, NDArray[np.float32]]] = deque()  # (end, t_ns, samples)
        self.position = 0  # samples received so far

    def append(self, samples: NDArray[np.float32], t_ns: int) -> None:
        """Add a chunk whose last sample was captured at ``t_ns``."""
        self.position += len(samples)
        self._chunks.append((self.position, t_ns, samples))
        while self._chunks and self._chunks[0][0] < self.position - self._keep:
            self._chunks.popleft()

    @property
    def chunks(self) -> int:
        """Chunks kept (bounded by the history's length)."""
        return len(self._chunks)

    def time_of(self, sample: int) -> int:
        """Monotonic time at which input sample ``sample`` was captured (interpolated)."""
        previous: int | None = None
        for end, t_ns, _ in self._chunks:
            if end >= sample:
                t = t_ns - round((end - sample) * 1e9 / self.rate_hz)
                # never before the previous chunk arrived (fast feeding has no real gaps)
                return t if previous is None else max(t, previous)
            previous = t_ns
        if self._chunks:
            end, t_ns, _ = self._chunks[-1]
            return t_ns - round((end - sample) * 1e9 / self.rate_hz)
        return self._clock()

    def since(self, sample: int) -> NDArray[np.float32]:
        """Every kept sample from position ``sample`` on."""
        parts = []
        for end, _, chunk in self._chunks:
            if end <= sample:
                continue
            parts.append(chunk[max(0, sample - (end - len(chunk))) :])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def window(self, end: int, n: int) -> NDArray[np.float32] | None:
        """The ``n`` samples ending at position ``end``, or None if not all are kept."""
        audio = self.since(end - n)[:n]
        return audio if len(audio) == n and end - n >= 0 else None
