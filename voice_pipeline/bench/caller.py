"""One simulated caller: a paced microphone and the script of its turns.

The protocol is behind :class:`CallerIO` (``caller_ws``, ``caller_twilio``):
``open`` connects and starts the session, ``send_audio`` sends one 20 ms frame,
``events`` yields what arrives as :mod:`.tracker` events, ``aclose`` ends it.

The :class:`Microphone` sends a frame every 20 ms by the wall clock (the
event loop's monotonic clock), always: queued speech, else silence. It keeps
the send time of every frame, so the moment any sample of the composed audio
was at the microphone is known (:func:`.scenario.sample_time`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from voice_pipeline.bench.scenario import SessionPlan, TurnPlan, sample_time
from voice_pipeline.bench.tracker import Tracker, TurnObservation, TurnResult, WireEvent, result
from voice_pipeline.connect import SessionDroppedError

FRAME_MS = 20


class CallerIO(Protocol):
    rate_hz: int  # of the audio sent
    budgets: dict[str, float]  # from the server's ``ready`` ({} when the protocol has none)
    close_info: str | None  # why the connection closed, once it has

    async def open(self) -> None: ...

    async def send_audio(self, frame: NDArray[np.float32]) -> None: ...

    def events(self) -> AsyncIterator[WireEvent]: ...

    async def aclose(self) -> None: ...


class Microphone:
    def __init__(self, send: Callable[[NDArray[np.float32]], Awaitable[None]], rate_hz: int) -> None:
        self._send = send
        self.rate_hz = rate_hz
        self.frame = rate_hz * FRAME_MS // 1000
        self._pending: deque[tuple[int, NDArray[np.float32]]] = deque()  # (absolute start, samples)
        self._queued_end = 0  # absolute sample index after the last queued speech
        self.sent_t: list[float] = []  # send time of frame k
        self.max_lag_s = 0.0  # the most a frame went out after it was due (the bench's own lag)
        self._sent = asyncio.Event()

    def say(self, samples: NDArray[np.float32]) -> int:
        """Queue speech; its absolute sample index (it starts with the next unsent frame at the earliest)."""
        start = max(self._queued_end, len(self.sent_t) * self.frame)
        self._pending.append((start, samples))
        self._queued_end = start + len(samples)
        return start

    def _compose(self, k: int) -> NDArray[np.float32]:
        a, b = k * self.frame, (k + 1) * self.frame
        out = np.zeros(self.frame, dtype=np.float32)
        while self._pending:
            start, x = self._pending[0]
            if start >= b:
                break
            lo, hi = max(a, start), min(b, start + len(x))
            out[lo - a : hi - a] = x[lo - start : hi - start]
            if start + len(x) <= b:
                self._pending.popleft()
            else:
                break
        return out

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        k = 0
        while True:
            due = t0 + (k + 1) * FRAME_MS / 1000
            await asyncio.sleep(max(0.0, due - loop.time()))
            frame = self._compose(k)
            now = loop.time()
            self.max_lag_s = max(self.max_lag_s, now - due)
            self.sent_t.append(now)
            await self._send(frame)
            k += 1
            self._sent.set()
            self._sent = asyncio.Event()

    async def time_of(self, boundary: int, *, end: bool) -> float:
        """When sample boundary ``boundary`` was at the microphone (waits until its frame is sent).
        ``end``: the boundary ends the sample before it (end of speech), else starts the one after."""
        k = (boundary - 1 if end else boundary) // self.frame
        while len(self.sent_t) <= k:
            await self._sent.wait()
        return sample_time(self.sent_t[k], (k + 1) * self.frame, boundary, self.rate_hz)


@dataclass(frozen=True, slots=True)
class CallerOptions:
    pause_s: float
    reply_timeout_s: float = 60.0
    quiet_s: float = 1.5  # Twilio: no reply audio for this long = the reply is over
    record_grace_s: float = 10.0  # /ws: wait this long at the end for outstanding turn.latency
    #: /ws: interrupt only while at least this much reply audio is left to play (the server
    #: pauses a reply after 200 ms of speech over it; an interruption as it ends is not one)
    min_overlap_s: float = 1.0


class Caller:
    """Runs one session's script; ``on_turn`` gets each turn's figures once they are final."""

    def __init__(
        self,
        io: CallerIO,
        plan: SessionPlan,
        options: CallerOptions,
        *,
        origin_t: float,
        has_records: bool,
        on_turn: Callable[[TurnResult], None] = lambda r: None,
    ) -> None:
        self.io = io
        self.plan = plan
        self.options = options
        self.tracker = Tracker()
        self.mic = Microphone(io.send_audio, io.rate_hz)
        self._origin_t = origin_t
        self._has_records = has_records
        self._on_turn = on_turn
        self._changed = asyncio.Event()
        self._closed = False
        self.results: list[TurnResult] = []

    async def open(self) -> None:
        """Connect and start the session (refusals raise :class:`SessionRefusedError`)."""
        await self.io.open()

    async def run(self) -> list[TurnResult]:
        """Say the script (after :meth:`open`); the connection is closed at the end, always."""
        try:
            async with asyncio.TaskGroup() as tg:
                mic = tg.create_task(self.mic.run())
                reader = tg.create_task(self._read())
                try:
                    await self._script()
                finally:
                    mic.cancel()
                    reader.cancel()
        finally:
            await self.io.aclose()
        return self.results

    async def _read(self) -> None:
        try:
            async for event in self.io.events():
                self.tracker.feed(event)
                self._notify()
        finally:
            self._closed = True
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self, done: Callable[[], bool], until: float) -> bool:
        """Wait until ``done()`` (True) or the loop time ``until`` (False); ticks every 50 ms."""
        loop = asyncio.get_running_loop()
        while not done():
            if self._closed:
                raise SessionDroppedError(
                    f"session {self.plan.session + 1}: {self.io.close_info or 'closed'}"
                )
            left = until - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 0.05))
        return True

    def _finished(self, obs: TurnObservation) -> Callable[[], bool]:
        loop = asyncio.get_running_loop()
        if self._has_records:
            return lambda: self.tracker.recorded(obs)
        return lambda: self.tracker.quiet(obs, loop.time(), self.options.quiet_s)

    async def _script(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.plan.start_offset_s)
        settled: list[TurnObservation] = []  # interrupted turns, reported with the next one
        interrupting = False  # the previous reply is still playing: speak over it now
        for turn in self.plan.turns:
            if self.tracker.turns and not interrupting:
                await self._wait(lambda: False, loop.time() + self.options.pause_s)
            obs = await self._say(turn, interrupting)
            interrupting = await self._listen(obs)
            if interrupting:
                settled.append(obs)
                continue
            for done in (*settled, obs):
                self._report(done)
            settled = []
        for obs in settled:  # a plan never ends on an interruption; belt and braces
            self._report(obs)
        if self._has_records:  # the ledger records still on their way (an interrupted reply's)
            await self._wait(
                lambda: all(self.tracker.recorded(o) for o in self.tracker.turns if o.server_turn_ids),
                loop.time() + self.options.record_grace_s,
            )
            self.results = [
                result(o, self.plan.session, self._origin_t, has_turn_ids=self._has_records)
                for o in self.tracker.turns
            ]

    async def _say(self, turn: TurnPlan, interrupting: bool) -> TurnObservation:
        """Speak ``turn``'s clip; returns once its speech has ended on the wire."""
        obs = self.tracker.begin(turn)
        start = self.mic.say(turn.clip.samples)
        onset = await self.mic.time_of(start + turn.clip.onset, end=False)
        self.tracker.speech_onset(obs, onset, interrupting=interrupting)
        self._notify()
        self.tracker.speech_end(obs, await self.mic.time_of(start + turn.clip.end, end=True))
        return obs

    async def _listen(self, obs: TurnObservation) -> bool:
        """Listen to the reply until it is over (False), or until it is time to interrupt it (True)."""
        assert obs.end_t is not None
        deadline = obs.end_t + self.options.reply_timeout_s
        finished = self._finished(obs)
        after = obs.plan.interrupt_after_s
        if after is not None and await self._wait(
            lambda: obs.first_voiced_t is not None or finished(), deadline
        ):
            if obs.first_voiced_t is not None:
                due = obs.first_voiced_t + after
                await self._wait(lambda: finished() or self._may_interrupt(obs, due), deadline)
            if not finished():
                return True
            obs.interrupt_skipped = "the reply was over before the interruption was due"
        if not await self._wait(finished, deadline):
            obs.error = f"no complete reply within {self.options.reply_timeout_s:g} s of the end of speech"
        return False

    def _may_interrupt(self, obs: TurnObservation, due: float) -> bool:
        """Past the interruption's moment, with enough of the reply left to speak over (/ws knows
        how much audio it holds; a Twilio caller holds ~0.1 s, the server paces the rest)."""
        now = asyncio.get_running_loop().time()
        if now < due:
            return False
        return not self._has_records or self.tracker.remaining(obs, now) >= self.options.min_overlap_s

    def _report(self, obs: TurnObservation) -> None:
        res = result(obs, self.plan.session, self._origin_t, has_turn_ids=self._has_records)
        self.results = [r for r in self.results if r.index != res.index] + [res]
        self.results.sort(key=lambda r: r.index)
        self._on_turn(res)
