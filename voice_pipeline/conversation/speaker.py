"""What one reply sends to the listener: :class:`ReplySpeaker` keeps every sample of
the reply, so a *pause* (the first stage of a barge-in) can flush the listener's buffer
at once and a *resume* (the interruption was only a backchannel) re-sends from exactly
where playback stopped (re-exported by :mod:`voice_pipeline.conversation.reply`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from voice_pipeline.transport import Transport


class ReplySpeaker:
    """Sends one reply's audio to the transport; pauses (flush) and resumes exactly."""

    def __init__(
        self,
        turn_id: int,
        transport: Transport,
        on_sent: Callable[[NDArray[np.int16]], None],
        on_cleared: Callable[[], None],
        *,
        on_started: Callable[[], None] | None = None,
        played_base: int = 0,
        held: bool = False,
    ) -> None:
        """``on_started``: called when the first audio is sent (the reply becomes audible);
        ``played_base``: samples of ``turn_id`` the listener played before this reply (a
        reply dropped when the user continued the turn), not counted as this reply's;
        ``held``: start as :meth:`hold` leaves it."""
        self.turn_id = turn_id
        self._transport = transport
        self._on_sent = on_sent
        self._on_cleared = on_cleared
        self._on_started = on_started
        self._played_base = played_base
        self._audio: list[NDArray[np.int16]] = []
        self.total = 0  # samples synthesized
        self.sent = 0  # samples handed to the transport (rewound to what was played on pause)
        self._pauses = 0  # pauses so far: a drain that saw one must wait for the re-sent rest
        self._running = asyncio.Event()  # set while not paused
        self._running.set()
        self._started = False
        self._shown = False  # a text-only reply's text went out while it was held
        if held:
            self.hold()

    @property
    def holding(self) -> bool:
        """Audio is held back now: flushed by :meth:`pause` until :meth:`resume` (the sender's
        own state, not the turn's: it lags the machine's PAUSED, which a resume leaves at once)."""
        return not self._running.is_set()

    @property
    def started(self) -> bool:
        """The reply reached the listener: audio was sent, or a text-only reply's text shown."""
        return self._started

    def show(self) -> None:
        """A text-only reply's first text is out: it counts as started (nothing to play) --
        once it is let go, if it is held (the text is out, but another reply has the floor)."""
        if self.holding:
            self._shown = True
        else:
            self._start()

    def _start(self) -> None:
        if not self._started:
            self._started = True
            if self._on_started is not None:
                self._on_started()

    def hold(self) -> None:
        """Send nothing yet -- only before anything was sent: a voice began that may be the user
        going on (once audio is out, speech over it is a barge-in's business), or an earlier
        reply is still to be heard. :meth:`resume` lets it go."""
        if not self._started:
            self._running.clear()

    async def add(self, pcm: NDArray[np.int16]) -> None:
        self._audio.append(pcm)
        self.total += len(pcm)
        await self._send_pending()

    def played(self) -> int:
        """Samples of this reply the listener has played."""
        return min(max(0, self._transport.played_samples(self.turn_id) - self._played_base), self.total)

    async def _send_pending(self) -> None:
        while not self.holding and self.sent < self.total:
            pcm = self._slice(self.sent, self.total)
            self.sent = self.total
            self._start()  # the first audio: the reply becomes audible
            await self._transport.play(self.turn_id, pcm)
            self._on_sent(pcm)

    def _slice(self, start: int, end: int) -> NDArray[np.int16]:
        whole = np.concatenate(self._audio) if len(self._audio) > 1 else self._audio[0]
        self._audio = [whole]
        return whole[start:end]

    def pause(self) -> int:
        """Stop sending and flush the listener's buffer now; return samples played."""
        self._pauses += 1
        self._running.clear()
        self._transport.clear(self.turn_id)
        self._on_cleared()
        played = self.played()
        self.sent = played
        return played

    async def resume(self) -> None:
        self._running.set()
        if self._shown:
            self._start()
        await self._send_pending()

    async def drain(self) -> None:
        """Return once everything is sent and played (waiting through pauses)."""
        while True:
            await self._running.wait()
            await self._send_pending()
            pauses = self._pauses
            await self._transport.drain(self.turn_id)
            if pauses == self._pauses and not self.holding and self.sent >= self.total:
                return
