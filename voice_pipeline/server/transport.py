"""The :class:`~voice_pipeline.transport.Transport` of one WebSocket client.

Events and audio go out through the connection's :class:`.outbound.Outbound`
(bounded queue, one writer task); what the listener has played comes from its
``playback`` reports, or is estimated in real time from when the audio was sent
(:class:`.playback.ListenerTimeline`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from voice_pipeline import events as ev
from voice_pipeline.clock import now_ns
from voice_pipeline.edge import Drained, drain_until
from voice_pipeline.edge.outbound import Outbound
from voice_pipeline.edge.playback import ListenerTimeline
from voice_pipeline.server.protocol import audio_clear, audio_header, dumps, event_message
from voice_pipeline.transport import trim_turns

log = logging.getLogger(__name__)


class WebSocketTransport:
    def __init__(
        self,
        outbound: Outbound,
        output_rate_hz: int,
        *,
        playback_reports: bool,
        origin_ns: int,
        drain_grace_s: float,
        on_event: Callable[[ev.Event], None] = lambda e: None,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        self.output_rate_hz = output_rate_hz
        self._out = outbound
        self.timeline = ListenerTimeline(output_rate_hz, reports=playback_reports)
        self._origin_ns = origin_ns
        self._grace_s = drain_grace_s
        self._on_event = on_event
        self._clock = clock
        self._epoch: dict[int, int] = {}  # turn -> clears so far (audio queued before one is stale)
        self._unflushed: set[int] = set()  # turns with audio sent since their last clear

    def audio_sent(self, turn_id: int, samples: int, t_ns: int) -> None:
        """Called by the writer as it writes a turn's audio to the socket."""
        self.timeline.sent(turn_id, samples, t_ns)

    # ------------------------------------------------------------ Transport

    def emit(self, event: ev.Event) -> None:
        self._on_event(event)
        msg = event_message(event, self._origin_ns)
        if msg is not None:
            self._out.send_text(dumps(msg))

    async def play(self, turn_id: int, pcm: NDArray[np.int16]) -> None:
        epoch = self._epoch.get(turn_id, 0)
        await self._out.wait_audio_room()
        if self._epoch.get(turn_id, 0) != epoch:
            return  # cleared while waiting for room: this audio must not be heard
        data = pcm.astype("<i2", copy=False).tobytes()
        self._unflushed.add(turn_id)
        self._out.put_audio(turn_id, dumps(audio_header(turn_id, len(pcm))), data, len(pcm))

    def clear(self, turn_id: int) -> None:
        self._epoch[turn_id] = self._epoch.get(turn_id, 0) + 1
        trim_turns(self._epoch)  # bounded over a long session: the oldest turns go
        self._out.drop_audio(turn_id)
        if turn_id in self._unflushed:  # a second clear with nothing sent since is not repeated
            self._unflushed.discard(turn_id)
            self.timeline.cut(turn_id, self._clock())
            self._out.send_text(dumps(audio_clear(turn_id)))

    def played_samples(self, turn_id: int) -> int:
        return self.timeline.played(turn_id, self._clock())

    async def drain(self, turn_id: int) -> None:
        """Wait until the listener has played all of ``turn_id`` sent so far, at most the
        audio's duration plus ``drain_grace_s`` (a listener that stopped reporting or playing)."""
        outcome = await drain_until(
            lambda now: self._out.audio_queued_for(turn_id) + self.timeline.remaining(turn_id, now),
            self._out.changed,
            closed=lambda: self._out.closed,
            rate_hz=self.output_rate_hz,
            grace_s=self._grace_s,
            clock=self._clock,
        )
        if outcome is Drained.TIMED_OUT:
            log.info("turn %d: listener did not confirm the end of playback; going on", turn_id)

    # ------------------------------------------------------------ client reports

    def report_playback(self, played: int, cleared: int | None) -> None:
        self.timeline.report(played, self._clock(), cleared)
        self._out.notify()
