"""The :class:`~voice_pipeline.transport.Transport` of a phone call: a :class:`.pacing.Pacer`
carried out by one writer task.

Everything that decides is the pacer's (what to send, when, what was heard);
this is its thin asyncio side, shared by both phone protocols. A protocol adds
only its :class:`PhoneLine`: how reply audio is encoded (µ-law, slin ...) and
how a frame, a mark or a clear is written (:mod:`.twilio_transport`,
:mod:`.audiosocket_server`).

``play`` waits while ``max_queued_s`` of audio is queued (backpressure) and
drops audio that waited across a clear; the writer sleeps until the head frame
is due (woken early when the queue changes); ``drain`` waits, at most the
audio's duration plus ``drain_grace_s``, until the pacer says the caller has
heard the turn (:func:`voice_pipeline.edge.drain_until`). If writing fails with
one of the line's ``gone`` exceptions (the peer hung up) the writer stops and
the transport is ``closed``: nothing more is sent, ``play`` and ``drain``
return at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from voice_pipeline import events as ev
from voice_pipeline.cancellation import cancel_and_wait
from voice_pipeline.clock import now_ns
from voice_pipeline.edge import Drained, drain_until
from voice_pipeline.telephony.pacing import Pacer, SendClear, SendFrame, SendMark, Sleep

log = logging.getLogger(__name__)


class PhoneLine(Protocol):
    """A phone protocol's part of the transport."""

    #: exceptions a write raises when the peer is gone (they stop the writer quietly)
    gone: tuple[type[Exception], ...]

    def encode(self, pcm: NDArray[np.int16]) -> bytes:
        """Reply audio (int16 at the pacer's rate) as the bytes the far end plays."""
        ...

    async def send(self, step: SendFrame | SendMark | SendClear) -> None:
        """Write one frame, mark or clear to the far end."""
        ...


class PacedTransport:
    def __init__(
        self,
        line: PhoneLine,
        pacer: Pacer,
        output_rate_hz: int,
        *,
        name: str,
        drain_grace_s: float = 2.0,
        on_event: Callable[[ev.Event], None] = lambda e: None,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        """``name`` says which call in the log."""
        self.output_rate_hz = output_rate_hz
        self.pacer = pacer
        self._line = line
        self._name = name
        self._grace_s = drain_grace_s
        self._on_event = on_event
        self._clock = clock
        self._wake = asyncio.Event()  # something to send, or the queue changed
        self._changed = asyncio.Event()  # frames sent, a mark echoed, a clear, closed
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    @property
    def frames_sent(self) -> int:
        return self.pacer.frames_sent

    @property
    def max_lead_ns(self) -> int:
        """The most audio ever buffered at the far end (estimate)."""
        return self.pacer.max_lead_ns

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._writer(), name=f"writer {self._name}")

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
            log.debug("%s turn %d: heard %r", self._name, event.turn_id, event.record.heard_text)

    async def play(self, turn_id: int, pcm: NDArray[np.int16]) -> None:
        epoch = self.pacer.epoch(turn_id)
        while not self.pacer.has_room() and not self.closed:
            self._changed.clear()
            await self._changed.wait()
        if self.closed or self.pacer.epoch(turn_id) != epoch:
            return  # hung up, or cleared while waiting for room: must not be heard
        self.pacer.push(turn_id, self._line.encode(pcm), len(pcm))
        self._wake.set()

    def clear(self, turn_id: int) -> None:
        self.pacer.clear(turn_id)
        self._wake.set()
        self._changed.set()

    def played_samples(self, turn_id: int) -> int:
        return self.pacer.heard(turn_id, self._clock())

    async def drain(self, turn_id: int) -> None:
        """Wait until the caller has heard everything of ``turn_id`` sent so far, at most the
        audio's duration plus ``drain_grace_s``."""
        outcome = await drain_until(
            lambda now: self.pacer.unplayed(turn_id, now),
            self._changed_within,
            closed=lambda: self.closed,
            rate_hz=self.output_rate_hz,
            grace_s=self._grace_s,
            clock=self._clock,
        )
        if outcome is Drained.TIMED_OUT:
            log.info("%s turn %d: the end of playback was not confirmed; going on", self._name, turn_id)

    def notify(self) -> None:
        """Something the far end said changed what was heard (e.g. a mark was echoed)."""
        self._changed.set()

    async def _changed_within(self, timeout_s: float) -> None:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)

    # ------------------------------------------------------------ the writer

    async def _writer(self) -> None:
        try:
            while True:
                step = self.pacer.next(self._clock())
                match step:
                    case None:
                        self._wake.clear()
                        await self._wake.wait()
                    case Sleep(ns=ns):
                        self._wake.clear()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._wake.wait(), ns / 1e9)
                    case SendFrame():
                        await self._line.send(step)
                        self._changed.set()
                    case _:
                        await self._line.send(step)
        except self._line.gone as exc:  # the peer is gone: nothing more can be sent
            log.info("%s: writer stopped: %r", self._name, exc)
        finally:
            self.closed = True
            self._changed.set()
