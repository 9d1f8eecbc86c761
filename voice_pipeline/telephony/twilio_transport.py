"""The :class:`~voice_pipeline.transport.Transport` of one Twilio call: paced µ-law out, marks back.

Reply audio (8 kHz int16; the session resamples to ``output_rate_hz`` itself) is
µ-law coded into 20 ms frames (160 bytes) and sent as ``media`` messages by the
shared paced writer (:class:`.paced.PacedTransport` over a ``MARKED``
:class:`.pacing.Pacer`): in real time, at most ``lead_ms`` ahead of the far
end's playout (so at most ``lead_ms`` + one frame is buffered there).

Played position: a ``mark`` follows every ``mark_every_frames`` frames and the
end of every chunk (clause); Twilio echoes a mark once the audio before it has
played (:meth:`TwilioTransport.mark_played`), so the last echoed mark of a turn
is what the caller has heard. Barge-in (``clear``): the turn's queued frames
are dropped, ``clear`` is sent at once, its marks still outstanding are
forgotten (Twilio echoes all pending marks when it clears; those were not
heard), and the played position stays at the last mark echoed before the clear.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import numpy as np
from numpy.typing import NDArray

from voice_pipeline import events as ev
from voice_pipeline.clock import now_ns
from voice_pipeline.telephony import mulaw
from voice_pipeline.telephony.paced import PacedTransport
from voice_pipeline.telephony.pacing import Heard, Pacer, SendClear, SendFrame, SendMark
from voice_pipeline.telephony.twilio import FRAME_BYTES, RATE_HZ, clear_message, mark_message, media_message

_SILENCE = b"\xff"  # µ-law code of 0


class _TwilioLine:
    gone: tuple[type[Exception], ...] = (Exception,)  # the socket is gone, however it says so

    def __init__(self, send: Callable[[str], Awaitable[None]], stream_sid: str) -> None:
        self._send = send
        self._sid = stream_sid

    def encode(self, pcm: NDArray[np.int16]) -> bytes:
        return mulaw.encode(pcm)

    async def send(self, step: SendFrame | SendMark | SendClear) -> None:
        match step:
            case SendFrame(payload=payload):
                await self._send(media_message(self._sid, payload))
            case SendMark(name=name):
                await self._send(mark_message(self._sid, name))
            case SendClear():
                await self._send(clear_message(self._sid))


class TwilioTransport(PacedTransport):
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
        pacer = Pacer(
            Heard.MARKED,
            rate_hz=RATE_HZ,
            frame_bytes=FRAME_BYTES,
            silence=_SILENCE,
            lead_ms=lead_ms,
            max_queued_s=max_queued_s,
            mark_every_frames=mark_every_frames,
        )
        super().__init__(
            _TwilioLine(send, stream_sid),
            pacer,
            RATE_HZ,
            name=f"call {stream_sid}",
            drain_grace_s=drain_grace_s,
            on_event=on_event,
            clock=clock,
        )
        self.stream_sid = stream_sid

    def mark_played(self, name: str) -> None:
        """Twilio echoed a mark: the audio before it has played."""
        if self.pacer.mark_echoed(name):  # else cleared (flushed, not heard), or not ours
            self.notify()
