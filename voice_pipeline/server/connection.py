"""One client on ``/ws``: its frames in, its :class:`~voice_pipeline.session.Session`, its writer.

Binary frames (PCM16 at the client's ``sample_rate``) are converted to float32,
resampled to the pipeline rate with one :class:`soxr.ResampleStream` per
connection, and pushed into the session stamped with the moment they arrived.
Every unusable frame is answered with an ``error`` and the session goes on.
No audio for ``idle_timeout_s`` closes the connection (1000, reason ``idle``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable

import soxr
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voice_pipeline.audio import input_resampler, to_float32
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.server.metrics import ServerMetrics
from voice_pipeline.server.outbound import Outbound, bound_send_buffer
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
from voice_pipeline.session import Session

log = logging.getLogger(__name__)

IDLE_CLOSE_CODE = 1000
STOP_REASON = "session ended by the client"


class VoiceConnection:
    def __init__(
        self,
        ws: ServerConnection,
        engines: Engines,
        cfg: Config,
        metrics: ServerMetrics,
        *,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        self._ws = ws
        self._engines = engines
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
        self.session_id = secrets.token_hex(8)
        self.session: Session | None = None
        self.transport: WebSocketTransport | None = None
        self._resampler: soxr.ResampleStream | None = None
        self._closed = False

    @property
    def outbound(self) -> Outbound:
        """The connection's bounded send queue."""
        return self._out

    async def run(self) -> None:
        """Serve the client until it stops, goes idle or disconnects, or the server closes."""
        self._out.start()
        try:
            await self._serve()
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("session %s failed", self.session_id)
            await self._ws.close(1011, "internal server error")
        finally:
            await self.aclose()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        idle_s = self._server_cfg.idle_timeout_s
        deadline = loop.time() + idle_s
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    data = await self._ws.recv()
            except TimeoutError:
                await self._ws.close(IDLE_CLOSE_CODE, f"idle: no audio for {idle_s:g} s")
                return
            if isinstance(data, str):
                if not await self._on_text(data):
                    return
            elif await self._on_audio(data):
                deadline = loop.time() + idle_s

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

    async def _on_audio(self, data: bytes) -> bool:
        """Handle one binary frame; True = it carried audio (an empty frame does not keep
        the session from going idle)."""
        try:
            pcm = self._protocol.binary(data)
        except ClientMessageError as exc:
            self._error(exc)
            return False
        assert self.session is not None
        samples = to_float32(pcm)
        if self._resampler is not None:
            samples = self._resampler.resample_chunk(samples)
        if len(samples):
            await self.session.push_audio(samples, self._clock())
        return len(pcm) > 0

    def _open(self, start: Start) -> None:
        rate = self._cfg.audio.pipeline_rate_hz
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
        if start.sample_rate_hz != rate:
            self._resampler = input_resampler(start.sample_rate_hz, rate)
        self.transport = transport
        self.session = Session(self._engines, self._cfg, transport, clock=self._clock)
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
        if self._closed:
            return
        self._closed = True
        if self.session is not None:
            await self.session.aclose()
        await self._out.aclose()
