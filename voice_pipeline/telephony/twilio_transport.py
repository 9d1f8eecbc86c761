"""The :class:`~voice_pipeline.transport.Transport` of one Twilio call: paced µ-law out, marks back.

Twilio plays whatever it is sent and buffers the rest, so a reply sent in one
burst could not be cut. Here reply audio (8 kHz int16; the session resamples to
``output_rate_hz`` itself) is µ-law coded into 20 ms frames (160 bytes) and one
writer task sends them in real time, at most ``lead_ms`` ahead of the far end's
playout (so at most ``lead_ms`` + one frame is buffered there).

Played position: a ``mark`` follows every ``mark_every_frames`` frames and the
end of every chunk (clause); Twilio echoes a mark once the audio before it has
played, so the last echoed mark of a turn is what the caller has heard.
Barge-in (:meth:`clear`): the turn's queued frames are dropped, ``clear`` is sent
at once, its marks still outstanding are forgotten (Twilio echoes all pending
marks when it clears; those were not heard), and the played position stays at
the last mark echoed before the clear.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from voice_pipeline import events as ev
from voice_pipeline.clock import now_ns
from voice_pipeline.tasks import cancel_and_wait
from voice_pipeline.telephony import mulaw
from voice_pipeline.telephony.twilio import FRAME_BYTES, RATE_HZ, clear_message, mark_message, media_message

log = logging.getLogger(__name__)

FRAME_NS = 20_000_000
_KEEP_TURNS = 64  # per-turn bookkeeping kept for the latest turns only
_MAX_PENDING_MARKS = 512  # marks awaiting their echo (~100 s of audio); older ones are forgotten
_SILENCE = 0xFF  # µ-law code of 0


@dataclass(frozen=True, slots=True)
class _Frame:
    turn_id: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class _Mark:
    turn_id: int
    position: int  # samples of the turn played once this mark is echoed


@dataclass(frozen=True, slots=True)
class _Clear:
    pass


_Item = _Frame | _Mark | _Clear


class TwilioTransport:
    output_rate_hz = RATE_HZ

    def __init__(
        self,
        send: Callable[[str], Awaitable[None]],
        stream_sid: str,
        *,
        lead_ms: int = 100,
        mark_every_frames: int = 10,
        max_queued_s: float = 2.0,
        drain_grace_s: float = 2.0,
        on_event: Callable[[ev.Event], None] = lambda e: None,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        self._send = send
        self.stream_sid = stream_sid
        self._lead_ns = lead_ms * 1_000_000
        self._mark_every = mark_every_frames
        self._max_frames = max(1, round(max_queued_s * 1000 / 20))
        self._grace_s = drain_grace_s
        self._on_event = on_event
        self._clock = clock
        self._items: deque[_Item] = deque()
        self._frames_queued = 0
        self._wake = asyncio.Event()  # something to send, or a clear
        self._changed = asyncio.Event()  # frames sent, a mark echoed, a clear, closed
        self._due_ns = 0  # when the far end will start playing the next frame sent
        self._queued_pos: dict[int, int] = {}  # turn -> samples queued or sent so far
        self._acked: dict[int, int] = {}  # turn -> samples confirmed played (echoed marks)
        self._pending: dict[str, _Mark] = {}  # marks sent, not echoed yet
        self._epoch: dict[int, int] = {}  # turn -> clears so far
        self._unflushed: set[int] = set()  # turns with audio queued since their last clear
        self._names = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self.closed = False
        self.frames_sent = 0
        self.max_lead_ns = 0  # the most audio ever buffered at the far end (estimate)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._writer(), name=f"twilio-{self.stream_sid}")

    async def aclose(self) -> None:
        """Stop the writer. Idempotent."""
        self.closed = True
        self._changed.set()
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    # ------------------------------------------------------------ Transport

    def emit(self, event: ev.Event) -> None:
        self._on_event(event)
        if isinstance(event, ev.TurnCompleted):
            log.debug("call %s turn %d: heard %r", self.stream_sid, event.turn_id, event.record.heard_text)

    async def play(self, turn_id: int, pcm: NDArray[np.int16]) -> None:
        epoch = self._epoch.get(turn_id, 0)
        while self._frames_queued >= self._max_frames and not self.closed:
            self._changed.clear()
            await self._changed.wait()
        if self.closed or self._epoch.get(turn_id, 0) != epoch:
            return  # hung up, or cleared while waiting for room: must not be heard
        data = mulaw.encode(pcm)
        if len(data) % FRAME_BYTES:
            data += bytes([_SILENCE]) * (FRAME_BYTES - len(data) % FRAME_BYTES)
        pos = self._queued_pos.get(turn_id, 0)
        end = pos + len(pcm)
        for i in range(0, len(data), FRAME_BYTES):
            self._items.append(_Frame(turn_id, data[i : i + FRAME_BYTES]))
            self._frames_queued += 1
            frame_end = min(end, pos + i + FRAME_BYTES)
            if frame_end == end or (i // FRAME_BYTES + 1) % self._mark_every == 0:
                self._items.append(_Mark(turn_id, frame_end))
        self._queued_pos[turn_id] = end
        self._unflushed.add(turn_id)
        self._wake.set()

    def clear(self, turn_id: int) -> None:
        self._epoch[turn_id] = self._epoch.get(turn_id, 0) + 1
        kept = [it for it in self._items if isinstance(it, _Clear) or it.turn_id != turn_id]
        self._frames_queued = sum(isinstance(it, _Frame) for it in kept)
        self._items = deque(kept)
        for name in [n for n, m in self._pending.items() if m.turn_id == turn_id]:
            del self._pending[name]
        self._queued_pos[turn_id] = self._acked.get(turn_id, 0)
        if turn_id in self._unflushed:  # a second clear with nothing sent since is not repeated
            self._unflushed.discard(turn_id)
            self._items.appendleft(_Clear())
            self._wake.set()
        self._changed.set()

    def played_samples(self, turn_id: int) -> int:
        return self._acked.get(turn_id, 0)

    async def drain(self, turn_id: int) -> None:
        """Wait until the caller has played (marks echoed) everything of ``turn_id`` sent so
        far, at most the audio's duration plus ``drain_grace_s``."""
        deadline: int | None = None
        while not self.closed:
            left = self._queued_pos.get(turn_id, 0) - self._acked.get(turn_id, 0)
            if left <= 0:
                return
            now = self._clock()
            if deadline is None:
                deadline = now + round((left / RATE_HZ + self._grace_s) * 1e9)
            if now >= deadline:
                log.info("call %s turn %d: marks not echoed; going on", self.stream_sid, turn_id)
                return
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), (deadline - now) / 1e9)

    # ------------------------------------------------------------ from the caller

    def mark_played(self, name: str) -> None:
        """Twilio echoed a mark: the audio before it has played."""
        mark = self._pending.pop(name, None)
        if mark is None:
            return  # cleared (flushed, not heard), or not ours
        self._acked[mark.turn_id] = max(self._acked.get(mark.turn_id, 0), mark.position)
        self._changed.set()

    # ------------------------------------------------------------ the writer

    async def _writer(self) -> None:
        try:
            while True:
                if not self._items:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                item = self._items[0]
                if isinstance(item, _Frame) and not await self._wait_turn(item):
                    continue  # the queue changed (a clear) while waiting
                self._items.popleft()
                match item:
                    case _Frame(payload=payload):
                        self._frames_queued -= 1
                        self.max_lead_ns = max(self.max_lead_ns, self._due_ns - self._clock())
                        await self._send(media_message(self.stream_sid, payload))
                        self.frames_sent += 1
                        self._due_ns += FRAME_NS
                        self._changed.set()
                    case _Mark():
                        name = f"t{item.turn_id}-{next(self._names)}"
                        self._pending[name] = item
                        self._forget(item.turn_id)
                        await self._send(mark_message(self.stream_sid, name))
                    case _Clear():
                        self._due_ns = self._clock()  # the far end's buffer is empty again
                        await self._send(clear_message(self.stream_sid))
        except Exception as exc:  # the socket is gone: nothing more can be sent
            log.info("call %s: writer stopped: %r", self.stream_sid, exc)
        finally:
            self.closed = True
            self._changed.set()

    def _forget(self, turn_id: int) -> None:
        """Bounded over a long call: marks the far end never echoed, turns long over."""
        while len(self._pending) > _MAX_PENDING_MARKS:
            del self._pending[next(iter(self._pending))]
        for book in (self._queued_pos, self._acked, self._epoch):
            for old in [t for t in book if t < turn_id - _KEEP_TURNS]:
                del book[old]

    async def _wait_turn(self, item: _Frame) -> bool:
        """Sleep until ``item`` may be sent (at most ``lead`` ahead of playout); False = the
        queue changed meanwhile."""
        now = self._clock()
        self._due_ns = max(self._due_ns, now)  # the far end ran dry: it plays this at once
        wait_ns = self._due_ns - self._lead_ns - now
        if wait_ns > 0:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_ns / 1e9)
            return (
                bool(self._items) and self._items[0] is item and self._clock() >= self._due_ns - self._lead_ns
            )
        return True
