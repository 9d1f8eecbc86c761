"""A simulated listener's playout buffer (pure; positions in output samples).

Each chunk starts playing at the later of the moment it was sent and the end of
the chunk before it; a clear silences everything from that moment on. The
result is exactly what a listener would have heard, on the input's timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray


@dataclass(slots=True)
class _Chunk:
    turn_id: int
    start: int  # output sample position where playback starts
    pcm: NDArray[np.int16]
    cut: int | None = None  # samples played before a clear cut it (None = whole)

    @property
    def end(self) -> int:
        return self.start + (len(self.pcm) if self.cut is None else self.cut)


@dataclass(slots=True)
class Playout:
    rate_hz: int
    chunks: list[_Chunk] = field(default_factory=list)

    def _tail(self) -> int:
        return max((c.end for c in self.chunks), default=0)

    def send(self, turn_id: int, pcm: NDArray[np.int16], at: int) -> int:
        """Queue ``pcm`` sent at position ``at``; return where it starts playing."""
        start = max(at, self._tail())
        self.chunks.append(_Chunk(turn_id, start, pcm))
        return start

    def clear(self, turn_id: int, at: int) -> None:
        """Silence every not-yet-played sample of ``turn_id`` from position ``at``."""
        kept: list[_Chunk] = []
        for c in self.chunks:
            if c.turn_id == turn_id and c.start >= at:
                continue  # not started yet: dropped whole
            if c.turn_id == turn_id and c.end > at:
                c.cut = at - c.start
            kept.append(c)
        self.chunks = kept

    def played(self, turn_id: int, at: int) -> int:
        """Samples of ``turn_id`` played by position ``at``."""
        return sum(max(0, min(c.end, at) - c.start) for c in self.chunks if c.turn_id == turn_id)

    def end_of(self, turn_id: int) -> int:
        """Position where ``turn_id``'s audio finishes playing (0 if it has none)."""
        return max((c.end for c in self.chunks if c.turn_id == turn_id), default=0)

    def window(self, start: int, end: int) -> NDArray[np.int16]:
        """What plays between positions ``start`` and ``end`` (zeros where nothing does)."""
        out = np.zeros(max(0, end - start), dtype=np.int16)
        for c in self.chunks:
            n = len(c.pcm) if c.cut is None else c.cut
            a, b = max(start, c.start), min(end, c.start + n)
            if a < b:
                out[a - start : b - start] = c.pcm[a - c.start : b - c.start]
        return out

    def forget_before(self, position: int) -> None:
        """Drop chunks that finished playing before ``position`` (bounded memory)."""
        self.chunks = [c for c in self.chunks if c.end > position]

    def render(self, length: int) -> NDArray[np.int16]:
        """The listener's audio, at least ``length`` samples long."""
        out = np.zeros(max(length, self._tail()), dtype=np.int16)
        for c in self.chunks:
            n = len(c.pcm) if c.cut is None else c.cut
            out[c.start : c.start + n] = c.pcm[:n]
        return out
