"""The :class:`~voice_pipeline.transport.Transport` of one ``/v1/realtime`` client.

Everything the session emits goes to the connection's
:class:`~voice_pipeline.realtime.bridge.RealtimeBridge`, and the server events it
answers with go out through the connection's bounded
:class:`~voice_pipeline.edge.outbound.Outbound` queue, in order. Reply audio
arrives at 24 kHz (:data:`~voice_pipeline.realtime.bridge.OUTPUT_RATE_HZ`, whatever
the response's format) and leaves as ``response.output_audio.delta`` text frames,
queued as audio: a barge-in drops what is still queued (``clear``), and the
queue's room is the reply's backpressure, as on ``/ws``.

What the listener has played is estimated in real time from when each delta was
written (:class:`~voice_pipeline.edge.playback.ListenerTimeline`: realtime
clients send no playback reports); the estimate times ``output_audio_buffer.stopped``
and the cut of an interrupted reply, unless the client truncates the item itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from voice_pipeline import events as ev
from voice_pipeline.clock import now_ns
from voice_pipeline.edge import Drained, drain_until
from voice_pipeline.edge.outbound import Outbound
from voice_pipeline.edge.playback import ListenerTimeline
from voice_pipeline.realtime.bridge import OUTPUT_RATE_HZ, RealtimeBridge
from voice_pipeline.realtime.event_json import ServerEventEncoder
from voice_pipeline.realtime.server_events import AudioDelta, ServerEvent
from voice_pipeline.transport import trim_turns

log = logging.getLogger(__name__)


class RealtimeTransport:
    output_rate_hz = OUTPUT_RATE_HZ

    def __init__(
        self,
        outbound: Outbound,
        bridge: RealtimeBridge,
        encoder: ServerEventEncoder,
        *,
        drain_grace_s: float,
        on_event: Callable[[ev.Event], None] = lambda e: None,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        self._out = outbound
        self._bridge = bridge
        self._encoder = encoder
        self._grace_s = drain_grace_s
        self._on_event = on_event
        self._clock = clock
        self.timeline = ListenerTimeline(OUTPUT_RATE_HZ, reports=False)
        self._epoch: dict[int, int] = {}  # turn -> clears so far (audio queued before one is stale)
        self._unflushed: set[int] = set()  # turns with audio queued since their last clear

    def send(self, events: Sequence[ServerEvent]) -> None:
        """Queue server events (never blocks)."""
        for event in events:
            self._out.send_text(self._encoder.text(event))

    def audio_sent(self, turn_id: int, samples: int, t_ns: int) -> None:
        """Called by the writer as it writes a turn's audio to the socket."""
        self.timeline.sent(turn_id, samples, t_ns)
        self.send(self._bridge.audio_written(turn_id))

    # ------------------------------------------------------------ Transport

    def emit(self, event: ev.Event) -> None:
        self._on_event(event)
        self.send(self._bridge.on_event(event))

    async def play(self, turn_id: int, pcm: NDArray[np.int16]) -> None:
        epoch = self._epoch.get(turn_id, 0)
        await self._out.wait_audio_room()
        if self._epoch.get(turn_id, 0) != epoch:
            return  # cleared while waiting for room: this audio must not be heard
        for event, samples in self._bridge.on_audio(turn_id, pcm):
            text = self._encoder.text(event)
            if isinstance(event, AudioDelta):
                self._unflushed.add(turn_id)
                trim_turns(self._unflushed)
                self._out.put_audio(turn_id, None, text, samples)
            else:
                self._out.send_text(text)

    def clear(self, turn_id: int) -> None:
        self._epoch[turn_id] = self._epoch.get(turn_id, 0) + 1
        trim_turns(self._epoch)
        self._out.drop_audio(turn_id)
        if turn_id in self._unflushed:
            self._unflushed.discard(turn_id)
            self.timeline.cut(turn_id, self._clock())

    def played_samples(self, turn_id: int) -> int:
        return self.timeline.played(turn_id, self._clock())

    async def drain(self, turn_id: int) -> None:
        """Wait until the listener has (by the estimate) played all of ``turn_id`` sent so
        far, at most the audio's duration plus ``drain_grace_s`` (the edges' shared
        :func:`~voice_pipeline.edge.drain_until`)."""
        outcome = await drain_until(
            lambda now: self._out.audio_queued_for(turn_id) + self.timeline.remaining(turn_id, now),
            self._out.changed,
            closed=lambda: self._out.closed,
            rate_hz=OUTPUT_RATE_HZ,
            grace_s=self._grace_s,
            clock=self._clock,
        )
        if outcome is Drained.TIMED_OUT:
            log.info("turn %d: playback did not end in time; going on", turn_id)
