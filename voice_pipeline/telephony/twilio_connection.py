"""One phone call on the server's ``/twilio`` WebSocket (Twilio Media Streams).

Inbound ``media`` (8 kHz µ-law) is decoded and pushed into the session through
the call's :class:`~voice_pipeline.edge.SessionScope` (resampled to the pipeline
rate, stamped with its arrival time; media moves the idle deadline on). The reply goes out through a paced
:class:`.twilio_transport.TwilioTransport`. An unusable message is logged and
the call goes on; a ``start`` with a wrong token (``telephony.twilio_token``) or
an unsupported ``mediaFormat`` closes the stream with the reason. ``stop``, a
dropped socket, ``idle_timeout_s`` without media or the server shutting down
end the session cleanly (:meth:`Session.aclose`: turns cancelled, LLM aborted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voice_pipeline.access import token_ok
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config
from voice_pipeline.conversation.session import Session
from voice_pipeline.edge import IDLE, EdgeMetrics, SessionScope
from voice_pipeline.engines import Engines
from voice_pipeline.telephony import mulaw
from voice_pipeline.telephony.twilio import (
    RATE_HZ,
    Connected,
    DtmfReceived,
    MarkPlayed,
    MediaReceived,
    StreamStarted,
    StreamStopped,
    TwilioMessageError,
    TwilioProtocol,
)
from voice_pipeline.telephony.twilio_transport import TwilioTransport

log = logging.getLogger(__name__)

TOKEN_PARAMETER = "token"
BAD_TOKEN_REASON = "bad or missing token"
STOP_REASON = "call ended"


class TwilioConnection:
    def __init__(
        self,
        ws: ServerConnection,
        engines: Engines,
        cfg: Config,
        metrics: EdgeMetrics,
        *,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        self._ws = ws
        self._cfg = cfg
        self._metrics = metrics
        self._clock = clock
        self._protocol = TwilioProtocol()
        self._scope = SessionScope(engines, cfg, clock=clock, label="call")
        self.session_id = self._scope.session_id
        self.transport: TwilioTransport | None = None
        self.errors = 0  # unusable messages so far

    @property
    def session(self) -> Session | None:
        return self._scope.session

    async def run(self) -> None:
        """Serve the call until it stops, goes idle or drops, or the server closes."""
        await self._scope.run(self._serve, gone=(ConnectionClosed,), on_error=self._failed)

    async def _failed(self) -> None:
        await self._ws.close(1011, "internal server error")

    async def _serve(self) -> None:
        while True:
            data = await self._scope.receive(self._ws.recv)  # moved on by media only
            if data is IDLE:
                await self._ws.close(1000, f"idle: no media for {self._scope.idle_s:g} s")
                return
            if isinstance(data, bytes):
                self._error(TwilioMessageError("binary frame (Media Streams sends JSON text)"))
                continue
            try:
                msg = self._protocol.receive(data)
            except TwilioMessageError as exc:
                self._error(exc)
                if exc.fatal:
                    await self._ws.close(1003, str(exc)[:120])
                    return
                continue
            if not await self._on_event(msg):
                return

    def _error(self, exc: TwilioMessageError) -> None:
        self.errors += 1
        log.warning("call %s: unusable message: %s", self.session_id, exc)

    async def _on_event(
        self, msg: Connected | StreamStarted | MediaReceived | DtmfReceived | MarkPlayed | StreamStopped
    ) -> bool:
        """Handle one event; False = the call is over."""
        match msg:
            case Connected():
                return True
            case StreamStarted():
                return await self._start(msg)
            case MediaReceived(payload=payload):
                await self._scope.push_audio(mulaw.decode(payload), RATE_HZ)
            case MarkPlayed(name=name):
                assert self.transport is not None  # the protocol saw the start
                self.transport.mark_played(name)
            case DtmfReceived(digit=digit):
                log.info("call %s: DTMF %s", self.session_id, digit)
            case StreamStopped():
                await self._ws.close(1000, STOP_REASON)
                return False
        return True

    async def _start(self, start: StreamStarted) -> bool:
        expected = self._cfg.telephony.twilio_token
        given = start.custom_parameters.get(TOKEN_PARAMETER, "")
        if not token_ok(given, expected):  # constant time; the token is never logged
            self._metrics.session_refused("token")
            log.warning("call %s (%s): refused, %s", self.session_id, start.call_sid, BAD_TOKEN_REASON)
            await self._ws.close(1008, BAD_TOKEN_REASON)
            return False
        transport = TwilioTransport(
            self._ws.send,
            start.stream_sid,
            max_queued_s=self._cfg.server.max_queued_audio_s,
            drain_grace_s=self._cfg.server.drain_grace_s,
            on_event=self._metrics.observe,
            clock=self._clock,
        )
        transport.start()
        self.transport = transport
        self._scope.open(transport, aclose=transport.aclose)
        log.info("call %s started: stream %s, call %s", self.session_id, start.stream_sid, start.call_sid)
        return True

    async def close(self, code: int, reason: str) -> None:
        """Close the WebSocket (the session is closed as :meth:`run` returns)."""
        await self._ws.close(code, reason)

    async def aclose(self) -> None:
        """Close the session (cancelling its turns), then the writer. Idempotent."""
        await self._scope.aclose()
