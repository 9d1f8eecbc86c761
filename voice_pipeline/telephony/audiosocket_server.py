"""``voice-pipeline serve --audiosocket-port N``: Asterisk AudioSocket calls over TCP.

Each connection is one call (dialplan ``AudioSocket(uuid,host:port)``): the
UUID frame opens a :class:`~voice_pipeline.conversation.session.Session`; 16-bit linear PCM
(8 kHz ``slin``, or the 0x11-0x18 higher rates) is resampled to the pipeline rate
with soxr and pushed in; the reply goes out as 20 ms 8 kHz ``slin`` frames (320
bytes) paced in real time by :class:`AudioSocketTransport`, at most ``lead_ms``
ahead of playout. AudioSocket has no marks and no clear: the played position
is estimated from when each frame was due to play, and a barge-in stops
sending at once (the ``lead_ms`` already sent cannot be recalled and counts as
heard). A hangup, an error frame, a frame that cannot be right (a lying
length), EOF or ``idle_timeout_s`` without audio end the call and its session.

AudioSocket has no authentication and no encryption: a peer outside
``telephony.audiosocket_allowed_peers`` (default: loopback only) is disconnected
before a byte is read, and only its address is logged. Keep the port on a
trusted network (the TLS option of ``serve`` does not cover it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from voice_pipeline import events as ev
from voice_pipeline.access import address_in, parse_networks
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config
from voice_pipeline.conversation.session import Session
from voice_pipeline.edge import IDLE, SessionLimit, SessionScope
from voice_pipeline.engines import Engines
from voice_pipeline.telephony.audiosocket import (
    FRAME_BYTES,
    RATE_HZ,
    AudioReceived,
    AudioSocketError,
    AudioSocketEvent,
    AudioSocketParser,
    CallIdentified,
    DtmfReceived,
    ErrorReceived,
    HungUp,
    Kind,
    frame,
)
from voice_pipeline.telephony.paced import PacedTransport
from voice_pipeline.telephony.pacing import Heard, Pacer, SendClear, SendFrame, SendMark

log = logging.getLogger(__name__)

_KEEP_SESSIONS = 16  # sessions kept for inspection (the latest; each holds ~0.3 MB)
ENDPOINT = "audiosocket"  # the name its calls are counted under in /metrics


class _SlinLine:
    gone: tuple[type[Exception], ...] = (ConnectionError, OSError)

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    def encode(self, pcm: NDArray[np.int16]) -> bytes:
        return pcm.astype("<i2", copy=False).tobytes()

    async def send(self, step: SendFrame | SendMark | SendClear) -> None:
        assert isinstance(step, SendFrame), "AudioSocket has no marks and no clear"
        self._writer.write(frame(Kind.SLIN, step.payload))
        await self._writer.drain()


class AudioSocketTransport(PacedTransport):
    def __init__(
        self,
        writer: asyncio.StreamWriter,
        *,
        lead_ms: int = 100,
        max_queued_s: float = 2.0,
        drain_grace_s: float = 2.0,
        on_event: Callable[[ev.Event], None] = lambda e: None,
        clock: Callable[[], int] = now_ns,
        name: str = "audiosocket",
    ) -> None:
        pacer = Pacer(
            Heard.DUE,
            rate_hz=RATE_HZ,
            frame_bytes=FRAME_BYTES,
            silence=b"\x00",
            lead_ms=lead_ms,
            max_queued_s=max_queued_s,
        )
        super().__init__(
            _SlinLine(writer),
            pacer,
            RATE_HZ,
            name=name,
            drain_grace_s=drain_grace_s,
            on_event=on_event,
            clock=clock,
        )


class AudioSocketServer:
    """Accepts AudioSocket calls on ``host``:``port`` (0 = any free port).

    ``limit``: the session limit and metrics it shares with the other edges of the
    server (``serve`` passes the WebSocket server's, so a call counts against
    ``max_sessions`` and shows in ``/metrics`` like a ``/ws`` session); default, a
    ``max_sessions`` of its own and no metrics.
    """

    def __init__(
        self,
        engines: Engines,
        cfg: Config,
        host: str,
        port: int,
        *,
        clock: Callable[[], int] = now_ns,
        limit: SessionLimit | None = None,
    ) -> None:
        self._engines = engines
        self._cfg = cfg
        self._host = host
        self._port = port
        self._clock = clock
        self.limit = limit or SessionLimit(cfg.server.max_sessions)
        self._server: asyncio.Server | None = None
        self.calls: set[asyncio.Task[None]] = set()
        #: the latest sessions started (for inspection; bounded on a server that runs for weeks)
        self.sessions: deque[Session] = deque(maxlen=_KEEP_SESSIONS)
        self._allowed_peers = parse_networks(cfg.telephony.audiosocket_allowed_peers)
        self.refused_peers = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self._host, self._port)

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.sockets[0].getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not address_in(host, self._allowed_peers):
            self.refused_peers += 1
            log.warning("audiosocket: refused a connection from %s (not in audiosocket_allowed_peers)", host)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
            return
        task = asyncio.current_task()
        assert task is not None
        self.calls.add(task)
        try:
            if not self.limit.acquire():
                log.warning("audiosocket: session limit reached; refusing a call")
                writer.write(frame(Kind.HANGUP))
                return
            self.limit.metrics.endpoint_opened(ENDPOINT)
            try:
                await self._call(reader, writer)
            finally:
                self.limit.release()
        except Exception:
            log.exception("audiosocket call failed")
        finally:
            self.calls.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _call(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One call, until it hangs up, fails, goes idle or ends; then the hangup frame."""
        scope = SessionScope(self._engines, self._cfg, clock=self._clock, label="audiosocket call")
        try:
            async with scope:
                await self._serve(scope, reader, writer)
        finally:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.write(frame(Kind.HANGUP))

    async def _serve(
        self, scope: SessionScope, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        parser = AudioSocketParser()
        while True:
            data = await scope.receive(lambda: reader.read(4096))  # moved on by audio only
            if data is IDLE:
                log.info("audiosocket call %s: idle for %g s", parser.call_id, scope.idle_s)
                return
            if not data:
                if parser.pending:
                    log.warning("audiosocket call %s: EOF inside a frame (lying length?)", parser.call_id)
                return
            try:
                events = parser.feed(data)
            except AudioSocketError as exc:
                log.warning("audiosocket call %s: %s; ending the call", parser.call_id, exc)
                return
            for event in events:
                if not await self._on_event(event, scope, writer, parser.call_id):
                    return

    async def _on_event(
        self,
        event: AudioSocketEvent,
        scope: SessionScope,
        writer: asyncio.StreamWriter,
        call_id: uuid.UUID | None,
    ) -> bool:
        """Handle one frame; False = the call is over."""
        match event:
            case CallIdentified(call_id=call_id):
                s = self._cfg.server
                transport = AudioSocketTransport(
                    writer,
                    max_queued_s=s.max_queued_audio_s,
                    drain_grace_s=s.drain_grace_s,
                    on_event=self.limit.metrics.observe,
                    clock=self._clock,
                    name=f"audiosocket call {call_id}",
                )
                transport.start()
                self.sessions.append(scope.open(transport, aclose=transport.aclose))
                log.info("audiosocket call %s started", call_id)
            case AudioReceived(pcm=pcm, rate_hz=rate_hz):
                await scope.push_audio(np.frombuffer(pcm, dtype="<i2").astype(np.int16), rate_hz)
            case DtmfReceived(digit=digit):
                log.info("audiosocket call %s: DTMF %s", call_id, digit)
            case HungUp():
                log.info("audiosocket call %s: hangup", call_id)
                return False
            case ErrorReceived(code=code):
                log.warning("audiosocket call %s: error frame (code %s)", call_id, code)
                return False
        return True

    async def aclose(self) -> None:
        """Stop accepting, end every call (sessions closed). Idempotent."""
        if self._server is None:
            return
        self._server.close()
        for task in list(self.calls):
            task.cancel()
        await asyncio.gather(*self.calls, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
