"""The paced writer of a phone call, as a pure decision: what to send next, and when.

A phone far end plays whatever it is sent and buffers the rest, so a reply sent
in one burst could not be cut. :class:`Pacer` holds the reply audio of a call as
a queue of 20 ms frames (already encoded: µ-law, slin ...) and answers the
writer's one question, :meth:`Pacer.next`: :class:`SendFrame` (the head frame is
due: at most ``lead_ms`` ahead of the far end's playout), :class:`SendMark`,
:class:`SendClear`, :class:`Sleep` (ns until the head frame is due) or None
(nothing queued). No clock, no asyncio, no socket: times are monotonic ns passed
in, and the async side (:mod:`.paced`) carries the answers out.

Per turn it keeps an *epoch* (clears so far: audio that waited for room across
a clear is stale), the samples queued or sent so far, and what the caller has
heard -- which depends on what the far end can tell and do (:class:`Heard`):

* ``MARKED`` (Twilio): a mark follows every ``mark_every_frames`` frames and the
  end of every chunk; the far end echoes a mark once the audio before it has
  played (:meth:`Pacer.mark_echoed`), so the last echoed mark is what was heard.
  A clear drops the turn's queued frames, puts :class:`SendClear` at the head
  (the far end flushes its buffer; once per clear with audio since), forgets the
  turn's outstanding marks (the far end echoes them all as it flushes: not heard)
  and the heard position stays at the last mark echoed before it.
* ``DUE`` (AudioSocket): no marks and no clear. What was heard is estimated from
  when each frame sent was due to play; a clear drops the queued frames, and the
  frames already sent (at most ``lead_ms``) cannot be recalled: they count as heard.

Timeline of one frame: ``due`` is when the far end starts playing the next frame
sent (never in the past: a far end that ran dry plays it at once); the frame may
leave at ``due - lead``; once it has, ``due`` moves on by one frame. A clear sent
(``MARKED``) empties the far end's buffer: ``due`` becomes now. Memory is bounded
however long the call: the latest :data:`~voice_pipeline.transport.KEEP_TURNS`
turns' books, at most :data:`MAX_PENDING_MARKS` outstanding marks, and frames
already played leave the sent-frame log.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from dataclasses import dataclass

from voice_pipeline.transport import trim_turns

FRAME_MS = 20
FRAME_NS = FRAME_MS * 1_000_000
#: marks awaiting their echo (~100 s of audio at one per 10 frames); older ones are forgotten
MAX_PENDING_MARKS = 512


class Heard(enum.Enum):
    """How a pacer knows what the caller has heard."""

    MARKED = "marked"  # echoed marks; the far end can be cleared (Twilio)
    DUE = "due"  # frames due to have played by now; nothing can be recalled (AudioSocket)


# ---------------------------------------------------------------- what to do next


@dataclass(frozen=True, slots=True)
class SendFrame:
    """Send this encoded frame now."""

    turn_id: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class SendMark:
    """Send a mark named ``name``; its echo means the audio before it has played."""

    turn_id: int
    name: str


@dataclass(frozen=True, slots=True)
class SendClear:
    """Tell the far end to drop what it has buffered."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Nothing is due for ``ns`` (unless the queue changes)."""

    ns: int


Step = SendFrame | SendMark | SendClear | Sleep


# ---------------------------------------------------------------- the queue


@dataclass(frozen=True, slots=True)
class _Frame:
    turn_id: int
    payload: bytes
    end: int  # samples of the turn played once this frame has


@dataclass(frozen=True, slots=True)
class _Mark:
    turn_id: int
    position: int  # samples of the turn played once this mark is echoed


@dataclass(frozen=True, slots=True)
class _Clear:
    pass


_Item = _Frame | _Mark | _Clear


class Pacer:
    def __init__(
        self,
        heard: Heard,
        *,
        rate_hz: int,
        frame_bytes: int,
        silence: bytes,
        lead_ms: int = 100,
        max_queued_s: float = 2.0,
        mark_every_frames: int = 10,
    ) -> None:
        """``frame_bytes`` of encoded audio make one 20 ms frame at ``rate_hz``; a chunk's
        last frame is padded with ``silence`` (one byte, repeated). ``max_queued_s``: how
        much audio :meth:`has_room` lets queue."""
        self.heard_by = heard
        self.frame_samples = rate_hz * FRAME_MS // 1000
        self._frame_bytes = frame_bytes
        self._silence = silence
        self._lead_ns = lead_ms * 1_000_000
        self._mark_every = mark_every_frames
        self._max_frames = max(1, round(max_queued_s * 1000 / FRAME_MS))
        self._items: deque[_Item] = deque()
        self._frames_queued = 0
        self._due_ns = 0  # when the far end will start playing the next frame sent
        self._epoch: dict[int, int] = {}  # turn -> clears so far
        self._queued_pos: dict[int, int] = {}  # turn -> samples queued or sent so far
        self._played: dict[int, int] = {}  # turn -> heard: echoed marks, or frames due by now
        self._floor: dict[int, int] = {}  # DUE: turn -> samples sent before a clear (heard)
        #: DUE: turn -> (play end ns, position) of frames sent, not yet folded into _played
        self._log: dict[int, deque[tuple[int, int]]] = {}
        self._pending: dict[str, _Mark] = {}  # MARKED: marks sent, not echoed yet
        self._unflushed: set[int] = set()  # MARKED: turns with audio queued since their last clear
        self._names = itertools.count(1)
        self.frames_sent = 0
        self.max_lead_ns = 0  # the most audio ever buffered at the far end (estimate)

    # ------------------------------------------------------------ the reply side

    def has_room(self) -> bool:
        """May more audio be queued (else the reply waits: backpressure)?"""
        return self._frames_queued < self._max_frames

    def epoch(self, turn_id: int) -> int:
        """Clears of ``turn_id`` so far: audio that waited across one must not be pushed."""
        return self._epoch.get(turn_id, 0)

    def push(self, turn_id: int, data: bytes, samples: int) -> None:
        """Queue ``samples`` of ``turn_id``, encoded as ``data``, as frames (and marks)."""
        if len(data) % self._frame_bytes:
            data += self._silence * (self._frame_bytes - len(data) % self._frame_bytes)
        pos = self._queued_pos.get(turn_id, 0)
        end = pos + samples
        marked = self.heard_by is Heard.MARKED
        for k in range(len(data) // self._frame_bytes):
            frame_end = min(end, pos + (k + 1) * self.frame_samples)
            payload = data[k * self._frame_bytes : (k + 1) * self._frame_bytes]
            self._items.append(_Frame(turn_id, payload, frame_end))
            self._frames_queued += 1
            if marked and (frame_end == end or (k + 1) % self._mark_every == 0):
                self._items.append(_Mark(turn_id, frame_end))
        self._queued_pos[turn_id] = end
        if marked:
            self._unflushed.add(turn_id)

    def clear(self, turn_id: int) -> None:
        """Barge-in: nothing more of ``turn_id`` is sent (see the module doc for what is heard)."""
        self._epoch[turn_id] = self._epoch.get(turn_id, 0) + 1
        self._items = deque(it for it in self._items if isinstance(it, _Clear) or it.turn_id != turn_id)
        self._frames_queued = sum(isinstance(it, _Frame) for it in self._items)
        if self.heard_by is Heard.MARKED:
            for name in [n for n, m in self._pending.items() if m.turn_id == turn_id]:
                del self._pending[name]
            self._queued_pos[turn_id] = self._played.get(turn_id, 0)
            if turn_id in self._unflushed:  # a second clear with nothing queued since is not repeated
                self._unflushed.discard(turn_id)
                self._items.appendleft(_Clear())
            return
        sent = max((p for _, p in self._log.pop(turn_id, ())), default=0)
        sent = max(sent, self._played.get(turn_id, 0))
        self._floor[turn_id] = max(self._floor.get(turn_id, 0), sent)  # cannot be recalled
        self._queued_pos[turn_id] = self._floor[turn_id]

    def heard(self, turn_id: int, now_ns: int) -> int:
        """Samples of ``turn_id`` the caller has heard by ``now_ns``."""
        if self.heard_by is Heard.MARKED:
            return self._played.get(turn_id, 0)
        self._fold(turn_id, now_ns)
        return max(self._floor.get(turn_id, 0), self._played.get(turn_id, 0))

    def unplayed(self, turn_id: int, now_ns: int) -> int:
        """Samples of ``turn_id`` queued or sent but not heard yet."""
        return self._queued_pos.get(turn_id, 0) - self.heard(turn_id, now_ns)

    # ------------------------------------------------------------ the far end

    def mark_echoed(self, name: str) -> bool:
        """The far end echoed mark ``name``: the audio before it has played. False = not
        one of ours, or flushed by a clear (not heard)."""
        mark = self._pending.pop(name, None)
        if mark is None:
            return False
        self._played[mark.turn_id] = max(self._played.get(mark.turn_id, 0), mark.position)
        return True

    # ------------------------------------------------------------ the writer

    def next(self, now_ns: int) -> Step | None:
        """What the writer does at ``now_ns``: send something (taken off the queue), sleep
        until the head frame is due, or (None) wait for audio."""
        if not self._items:
            return None
        head = self._items[0]
        if isinstance(head, _Frame):
            self._due_ns = max(self._due_ns, now_ns)  # the far end ran dry: it plays this at once
            wait_ns = self._due_ns - self._lead_ns - now_ns
            if wait_ns > 0:
                return Sleep(wait_ns)
        self._items.popleft()
        match head:
            case _Frame(turn_id=turn_id, payload=payload, end=end):
                self._frames_queued -= 1
                self.max_lead_ns = max(self.max_lead_ns, self._due_ns - now_ns)
                self._due_ns += FRAME_NS
                self.frames_sent += 1
                if self.heard_by is Heard.DUE:
                    self._log.setdefault(turn_id, deque()).append((self._due_ns, end))
                    self._fold(turn_id, now_ns)
                self._forget()
                return SendFrame(turn_id, payload)
            case _Mark(turn_id=turn_id):
                name = f"t{turn_id}-{next(self._names)}"
                self._pending[name] = head
                while len(self._pending) > MAX_PENDING_MARKS:  # a far end that never echoes
                    del self._pending[next(iter(self._pending))]
                return SendMark(turn_id, name)
            case _Clear():
                self._due_ns = now_ns  # the far end's buffer is empty again
                return SendClear()

    def _fold(self, turn_id: int, now_ns: int) -> None:
        """Frames of ``turn_id`` due to have played by ``now_ns`` leave the log."""
        log = self._log.get(turn_id)
        while log and log[0][0] <= now_ns:
            self._played[turn_id] = max(self._played.get(turn_id, 0), log.popleft()[1])

    def _forget(self) -> None:
        """Bounded over a long call: the books of turns long over go."""
        for book in (self._epoch, self._queued_pos, self._played, self._floor, self._log):
            trim_turns(book)
        trim_turns(self._unflushed)
