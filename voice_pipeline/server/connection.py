"""One client on ``/ws``: its frames in, its session, its writer.

Binary frames (PCM16 at the client's ``sample_rate``) are pushed into the session
through the connection's :class:`~voice_pipeline.edge.SessionScope` (converted to
float32, resampled to the pipeline rate, stamped with the moment they arrived).
Every unusable frame is answered with an ``error`` and the session goes on.
No audio for ``idle_timeout_s`` closes the connection (1000, reason ``idle``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config
from voice_pipeline.conversation.session import Session
from voice_pipeline.edge import IDLE, EdgeMetrics, SessionScope
from voice_pipeline.edge.outbound import Outbound, bound_send_buffer
from voice_pipeline.engines import Engines
from voice_pipeline.server.protocol import (
    ClientMessageError,
    ClientProtocol,
    ErrorReported,
    Interrupt,
    Playback,
    PttEnd,
    PttStart,
    Start,
    Stop,
    ready,
)
from voice_pipeline.server.transport import WebSocketTransport

log = logging.getLogger(__name__)

IDLE_CLOSE_CODE = 1000
STOP_REASON = "session ended by the client"


class VoiceConnection:
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
        self._server_cfg = cfg.server
        self._metrics = metrics
        self._clock = clock
        self._protocol = ClientProtocol(cfg.server.max_frame_bytes)
        bound_send_buffer(ws.transport)  # with the bounded queue: a non-reader holds little
        self._out = Outbound(
            ws,
            max_events=cfg.server.max_queued_events,
            max_audio_samples=round(cfg.server.max_queued_audio_s * 48000),
            clock=clock,
        )
        self._scope = SessionScope(engines, cfg, clock=clock)
        self._scope.close_after(self._out.aclose)
        self.session_id = self._scope.session_id
        self.transport: WebSocketTransport | None = None
        self._input_rate_hz = cfg.audio.pipeline_rate_hz

    @property
    def session(self) -> Session | None:
        return self._scope.session

    @property
    def outbound(self) -> Outbound:
        """The connection's bounded send queue."""
        return self._out

    async def run(self) -> None:
        """Serve the client until it stops, goes idle or disconnects, or the server closes."""
        self._out.start()
        await self._scope.run(self._serve, gone=(ConnectionClosed,), on_error=self._failed)

    async def _failed(self) -> None:
        await self._ws.close(1011, "internal server error")

    async def _serve(self) -> None:
        while True:
            data = await self._scope.receive(self._ws.recv)  # moved on by audio only
            if data is IDLE:
                await self._ws.close(IDLE_CLOSE_CODE, f"idle: no audio for {self._scope.idle_s:g} s")
                return
            if isinstance(data, str):
                if not await self._on_text(data):
                    return
            else:
                await self._on_audio(data)

    def _error(self, exc: ClientMessageError) -> None:
        log.debug("session %s: client error %s: %s", self.session_id, exc.code, exc)
        self._out.send_text(ErrorReported(str(exc.code), str(exc)).serialize())

    async def _on_text(self, data: str) -> bool:
        """Handle one text frame; False = the session is over."""
        try:
            msg = self._protocol.text(data)
        except ClientMessageError as exc:
            self._error(exc)
            return True
        if isinstance(msg, Start):
            self._open(msg)
            return True
        session, transport = self.session, self.transport
        assert session is not None and transport is not None  # the protocol saw the start
        match msg:
            case Playback(played=played, cleared=cleared):
                transport.report_playback(played, cleared)
            case Interrupt():
                session.interrupt()
            case PttStart():
                session.ptt_start()
            case PttEnd():
                session.ptt_end()
            case Stop():
                await self._ws.close(1000, STOP_REASON)
                return False
        return True

    async def _on_audio(self, data: bytes) -> None:
        """Handle one binary frame (an empty one does not keep the session from going idle)."""
        try:
            pcm = self._protocol.binary(data)
        except ClientMessageError as exc:
            self._error(exc)
            return
        await self._scope.push_audio(pcm, self._input_rate_hz)

    def _open(self, start: Start) -> None:
        transport = WebSocketTransport(
            self._out,
            start.output_rate_hz,
            playback_reports=start.capabilities.playback_reports,
            origin_ns=self._clock(),
            drain_grace_s=self._server_cfg.drain_grace_s,
            on_event=self._metrics.observe,
            clock=self._clock,
        )
        self._out.on_audio_sent = transport.audio_sent
        self._out.max_audio_samples = round(self._server_cfg.max_queued_audio_s * start.output_rate_hz)
        hello = ready(self.session_id, start, self._server_cfg.max_frame_bytes, self._cfg.budget)
        self._out.send_text(hello.serialize())
        self._input_rate_hz = start.sample_rate_hz
        self.transport = transport
        self._scope.open(transport)
        log.info(
            "session %s started: %d Hz in, %d Hz out, playback reports %s",
            self.session_id,
            start.sample_rate_hz,
            start.output_rate_hz,
            start.capabilities.playback_reports,
        )

    async def close(self, code: int, reason: str) -> None:
        """Close the WebSocket (the session is closed as :meth:`run` returns)."""
        await self._ws.close(code, reason)

    async def aclose(self) -> None:
        """Close the session (cancelling its turns) and stop the writer. Idempotent."""
        await self._scope.aclose()
