"""What a remote listener has played of each reply (pure; times are monotonic ns).

The listener plays the reply audio it receives in order, without gaps while it
has some queued, and drops a turn's queued audio on ``audio.clear``. Positions
are on its *play timeline*: reply samples played since ``start``, at the output
rate -- the unit of the client's ``playback`` reports.

:class:`ListenerTimeline` places every chunk sent on that timeline and estimates
the listener's position: from the latest report, advanced in real time while
audio is queued (capped at ``max_ahead`` samples past the report, so a listener
that stopped playing is not believed to go on); or, for a client that never
reports, in real time from the moment audio was sent. A clear cuts the turn's
chunks at the estimated position; when the client acknowledges the clear with
the exact position (``playback`` with ``cleared``), the cut is redone there and
everything sent after it moves accordingly.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from voice_pipeline.transport import trim_turns

_MAX_PENDING_CUTS = 8  # clears awaiting an acknowledgement
_CUT_ACK_WAIT_NS = 5_000_000_000  # a clear not acknowledged by then never will be


@dataclass(slots=True)
class _Chunk:
    serial: int
    turn_id: int
    samples: int
    kept: int | None = None  # samples left by a cut (None = all)

    @property
    def length(self) -> int:
        return self.samples if self.kept is None else self.kept


@dataclass(slots=True)
class _Cut:
    turn_id: int
    before: int  # serial of the first chunk sent after the clear
    at: int  # estimated position of the cut
    t_ns: int
    undo: list[tuple[int, int | None]] = field(default_factory=list)  # (serial, kept before)


class ListenerTimeline:
    def __init__(self, rate_hz: int, *, reports: bool, max_ahead_s: float = 1.0) -> None:
        self.rate_hz = rate_hz
        self.reports = reports  # positions come from the client's reports
        self._max_ahead = round(max_ahead_s * rate_hz)
        self._chunks: list[_Chunk] = []
        self._serial = 0
        self._base = 0  # position where self._chunks[0] starts
        self._folded: dict[int, int] = {}  # turn -> played samples of chunks no longer kept
        self._cuts: deque[_Cut] = deque()
        self._pos = 0.0  # estimated position at self._t_ns
        self._t_ns: int | None = None
        self._reported = 0  # latest reported position

    # ------------------------------------------------------------ positions

    @property
    def tail(self) -> int:
        return self._base + sum(c.length for c in self._chunks)

    def _starts(self) -> list[int]:
        out, pos = [], self._base
        for c in self._chunks:
            out.append(pos)
            pos += c.length
        return out

    def _advance(self, now_ns: int) -> None:
        if self._t_ns is not None and now_ns > self._t_ns:
            limit = float(self.tail)
            if self.reports:
                limit = min(limit, self._reported + self._max_ahead)
            ahead = self._pos + (now_ns - self._t_ns) * self.rate_hz / 1e9
            self._pos = max(self._pos, min(ahead, limit))
        if self._t_ns is None or now_ns > self._t_ns:
            self._t_ns = now_ns

    def position(self, now_ns: int) -> int:
        """Estimated samples played by the listener at ``now_ns``."""
        self._advance(now_ns)
        return int(self._pos)

    # ------------------------------------------------------------ changes

    def sent(self, turn_id: int, samples: int, now_ns: int) -> None:
        """``samples`` of ``turn_id`` left for the listener at ``now_ns``."""
        self._advance(now_ns)
        self._chunks.append(_Chunk(self._serial, turn_id, samples))
        self._serial += 1
        self._fold(now_ns)

    def report(self, played: int, now_ns: int, cleared: int | None = None) -> None:
        """The client says it has played ``played`` samples (acknowledging the clear
        of turn ``cleared``, if set)."""
        self.reports = True
        if cleared is not None:
            self._confirm_cut(cleared, played)
        played = min(played, self.tail)
        self._reported = played
        self._pos = float(played)
        self._t_ns = now_ns
        self._fold(now_ns)

    def cut(self, turn_id: int, now_ns: int) -> int:
        """Drop what the listener had not played of ``turn_id`` yet; return the cut's position."""
        at = self.position(now_ns)
        self._pos = float(at)
        record = _Cut(turn_id, self._serial, at, now_ns)
        self._apply_cut(record, at)
        self._cuts.append(record)
        while len(self._cuts) > _MAX_PENDING_CUTS:
            self._cuts.popleft()
        return at

    def _apply_cut(self, cut: _Cut, at: int) -> None:
        for c, start in zip(self._chunks, self._starts(), strict=True):
            if c.turn_id != cut.turn_id or c.serial >= cut.before or start + c.length <= at:
                continue
            cut.undo.append((c.serial, c.kept))
            c.kept = max(0, at - start)

    def _confirm_cut(self, turn_id: int, at: int) -> None:
        while self._cuts and self._cuts[0].turn_id != turn_id:
            self._cuts.popleft()  # never acknowledged: the estimate stands
        if not self._cuts:
            return
        cut = self._cuts.popleft()
        by_serial = {c.serial: c for c in self._chunks}
        for serial, kept in cut.undo:
            if serial in by_serial:
                by_serial[serial].kept = kept
        cut.undo.clear()
        self._apply_cut(cut, at)

    def _fold(self, now_ns: int) -> None:
        """Forget chunks the listener has finished (bounded memory over a long session);
        keep those a pending acknowledgement may still re-cut."""
        while self._cuts and now_ns - self._cuts[0].t_ns > _CUT_ACK_WAIT_NS:
            self._cuts.popleft()
        played = self._reported if self.reports else int(self._pos)
        keep_from = self._serial
        for cut in self._cuts:
            keep_from = min(keep_from, cut.before, *(serial for serial, _ in cut.undo))
        while self._chunks and self._chunks[0].serial < keep_from:
            first = self._chunks[0]
            if self._base + first.length > played:
                break
            self._folded[first.turn_id] = self._folded.get(first.turn_id, 0) + first.length
            self._base += first.length
            self._chunks.pop(0)
        trim_turns(self._folded)  # a session of hours: forget the oldest turns

    # ------------------------------------------------------------ queries

    def played(self, turn_id: int, now_ns: int) -> int:
        """Samples of ``turn_id`` the listener has played by ``now_ns`` (estimated)."""
        pos = self.position(now_ns)
        total = self._folded.get(turn_id, 0)
        for c, start in zip(self._chunks, self._starts(), strict=True):
            if c.turn_id == turn_id:
                total += max(0, min(pos - start, c.length))
        return total

    def remaining(self, turn_id: int, now_ns: int) -> int:
        """Samples of ``turn_id`` sent but not yet played."""
        pos = self.position(now_ns)
        end = 0
        for c, start in zip(self._chunks, self._starts(), strict=True):
            if c.turn_id == turn_id and c.length:
                end = start + c.length
        return max(0, end - pos)
