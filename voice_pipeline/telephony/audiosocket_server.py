"""``voice-pipeline serve --audiosocket-port N``: Asterisk AudioSocket calls over TCP.

Each connection is one call (dialplan ``AudioSocket(uuid,host:port)``): the
UUID frame opens a :class:`~voice_pipeline.session.Session`; slin16 audio
(8 kHz, or the 0x11-0x18 higher rates) is resampled to the pipeline rate with
soxr and pushed in; the reply goes out as 20 ms slin16 8 kHz frames (320
bytes) paced in real time by :class:`AudioSocketTransport`, at most ``lead_ms``
ahead of playout. AudioSocket has no marks and no clear: the played position
is estimated from when each frame was due to play, and a barge-in stops
sending at once (the ``lead_ms`` already sent cannot be recalled and counts as
heard). A hangup, an error frame, a frame that cannot be right (a lying
length), EOF or ``idle_timeout_s`` without audio end the call and its session.

AudioSocket has no authentication and no encryption: a peer outside
``server.audiosocket_allowed_peers`` (default: loopback only) is disconnected
before a byte is read, and only its address is logged. Keep the port on a
trusted network (the TLS option of ``serve`` does not cover it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import soxr
from numpy.typing import NDArray

from voice_pipeline import events as ev
from voice_pipeline.access import address_in, parse_networks
from voice_pipeline.audio import input_resampler, to_float32
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.session import Session
from voice_pipeline.tasks import cancel_and_wait
from voice_pipeline.telephony.audiosocket import (
    FRAME_BYTES,
    RATE_HZ,
    AudioReceived,
    AudioSocketError,
    AudioSocketParser,
    CallIdentified,
    DtmfReceived,
    ErrorReceived,
    HungUp,
    Kind,
    frame,
)

log = logging.getLogger(__name__)

FRAME_NS = 20_000_000
FRAME_SAMPLES = FRAME_BYTES // 2
_KEEP_TURNS = 64  # per-turn bookkeeping kept for the latest turns only
_KEEP_SESSIONS = 16  # sessions kept for inspection (the latest; each holds ~0.3 MB)


@dataclass(frozen=True, slots=True)
class _Frame:
    turn_id: int
    pcm: bytes
    end: int  # position in the turn after this frame


class AudioSocketTransport:
    output_rate_hz = RATE_HZ

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        *,
        lead_ms: int = 100,
        max_queued_s: float = 2.0,
        drain_grace_s: float = 2.0,
        on_event: Callable[[ev.Event], None] = lambda e: None,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        self._writer = writer
        self._lead_ns = lead_ms * 1_000_000
        self._max_frames = max(1, round(max_queued_s * 50))
        self._grace_s = drain_grace_s
        self._on_event = on_event
        self._clock = clock
        self._items: deque[_Frame] = deque()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._due_ns = 0
        self._queued_pos: dict[int, int] = {}
        self._floor: dict[int, int] = {}  # turn -> samples certainly heard (sent before a clear)
        #: turn -> (play end ns, position) of frames sent and not yet played; played ones are
        #: folded into ``_played`` (bounded however long the reply or the call)
        self._log: dict[int, deque[tuple[int, int]]] = {}
        self._played: dict[int, int] = {}  # turn -> position of the last frame played
        self._epoch: dict[int, int] = {}
        self._task: asyncio.Task[None] | None = None
        self.closed = False
        self.frames_sent = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="audiosocket-writer")

    async def aclose(self) -> None:
        self.closed = True
        self._changed.set()
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    # ------------------------------------------------------------ Transport

    def emit(self, event: ev.Event) -> None:
        self._on_event(event)

    async def play(self, turn_id: int, pcm: NDArray[np.int16]) -> None:
        epoch = self._epoch.get(turn_id, 0)
        while len(self._items) >= self._max_frames and not self.closed:
            self._changed.clear()
            await self._changed.wait()
        if self.closed or self._epoch.get(turn_id, 0) != epoch:
            return
        data = pcm.astype("<i2", copy=False).tobytes()
        if len(data) % FRAME_BYTES:
            data += b"\x00" * (FRAME_BYTES - len(data) % FRAME_BYTES)
        pos = self._queued_pos.get(turn_id, 0)
        end = pos + len(pcm)
        for i in range(0, len(data), FRAME_BYTES):
            self._items.append(
                _Frame(turn_id, data[i : i + FRAME_BYTES], min(end, pos + (i + FRAME_BYTES) // 2))
            )
        self._queued_pos[turn_id] = end
        self._wake.set()

    def clear(self, turn_id: int) -> None:
        self._epoch[turn_id] = self._epoch.get(turn_id, 0) + 1
        self._items = deque(f for f in self._items if f.turn_id != turn_id)
        sent = max((p for _, p in self._log.pop(turn_id, ())), default=0)
        sent = max(sent, self._played.get(turn_id, 0))
        self._floor[turn_id] = max(self._floor.get(turn_id, 0), sent)  # cannot be recalled
        self._queued_pos[turn_id] = self._floor[turn_id]
        self._wake.set()
        self._changed.set()

    def played_samples(self, turn_id: int) -> int:
        self._fold(turn_id, self._clock())
        return max(self._floor.get(turn_id, 0), self._played.get(turn_id, 0))

    def _fold(self, turn_id: int, now: int) -> None:
        """Frames of ``turn_id`` due to have played by ``now`` leave the log."""
        log = self._log.get(turn_id)
        while log and log[0][0] <= now:
            self._played[turn_id] = max(self._played.get(turn_id, 0), log.popleft()[1])

    def _forget_old_turns(self, turn_id: int) -> None:
        for book in (self._queued_pos, self._floor, self._log, self._played, self._epoch):
            for old in [t for t in book if t < turn_id - _KEEP_TURNS]:
                del book[old]

    async def drain(self, turn_id: int) -> None:
        deadline: int | None = None
        while not self.closed:
            left = self._queued_pos.get(turn_id, 0) - self.played_samples(turn_id)
            if left <= 0:
                return
            now = self._clock()
            if deadline is None:
                deadline = now + round((left / RATE_HZ + self._grace_s) * 1e9)
            if now >= deadline:
                return
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(0.02, (deadline - now) / 1e9))

    # ------------------------------------------------------------ the writer

    async def _run(self) -> None:
        try:
            while True:
                if not self._items:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                item = self._items[0]
                now = self._clock()
                self._due_ns = max(self._due_ns, now)
                wait_ns = self._due_ns - self._lead_ns - now
                if wait_ns > 0:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), wait_ns / 1e9)
                    continue  # re-check: a clear may have dropped the item
                self._items.popleft()
                self._writer.write(frame(Kind.SLIN, item.pcm))
                await self._writer.drain()
                self._due_ns += FRAME_NS
                self._log.setdefault(item.turn_id, deque()).append((self._due_ns, item.end))
                self._fold(item.turn_id, self._clock())
                self._forget_old_turns(item.turn_id)
                self.frames_sent += 1
                self._changed.set()
        except (ConnectionError, OSError) as exc:
            log.info("audiosocket writer stopped: %r", exc)
        finally:
            self.closed = True
            self._changed.set()


class AudioSocketServer:
    """Accepts AudioSocket calls on ``host``:``port`` (0 = any free port)."""

    def __init__(
        self, engines: Engines, cfg: Config, host: str, port: int, *, clock: Callable[[], int] = now_ns
    ) -> None:
        self._engines = engines
        self._cfg = cfg
        self._host = host
        self._port = port
        self._clock = clock
        self._server: asyncio.Server | None = None
        self.calls: set[asyncio.Task[None]] = set()
        #: the latest sessions started (for inspection; bounded on a server that runs for weeks)
        self.sessions: deque[Session] = deque(maxlen=_KEEP_SESSIONS)
        self._allowed_peers = parse_networks(cfg.server.audiosocket_allowed_peers)
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
            if len(self.calls) > self._cfg.server.max_sessions:
                log.warning("audiosocket: session limit reached; refusing a call")
                writer.write(frame(Kind.HANGUP))
                return
            await self._call(reader, writer)
        except Exception:
            log.exception("audiosocket call failed")
        finally:
            self.calls.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _call(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parser = AudioSocketParser()
        session: Session | None = None
        transport: AudioSocketTransport | None = None
        resamplers: dict[int, soxr.ResampleStream] = {}
        rate = self._cfg.audio.pipeline_rate_hz
        idle_s = self._cfg.server.idle_timeout_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + idle_s  # moved on by audio only (DTMF or junk is no audio)
        try:
            while True:
                try:
                    async with asyncio.timeout_at(deadline):
                        data = await reader.read(4096)
                except TimeoutError:
                    log.info("audiosocket call %s: idle for %g s", parser.call_id, idle_s)
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
                    match event:
                        case CallIdentified(call_id=call_id):
                            transport = AudioSocketTransport(
                                writer,
                                max_queued_s=self._cfg.server.max_queued_audio_s,
                                drain_grace_s=self._cfg.server.drain_grace_s,
                                clock=self._clock,
                            )
                            transport.start()
                            session = Session(self._engines, self._cfg, transport, clock=self._clock)
                            self.sessions.append(session)
                            log.info("audiosocket call %s started", call_id)
                        case AudioReceived(pcm=pcm, rate_hz=in_rate):
                            assert session is not None  # the parser saw the UUID
                            samples = to_float32(np.frombuffer(pcm, dtype="<i2").astype(np.int16))
                            if in_rate != rate:
                                rs = resamplers.get(in_rate)
                                if rs is None:
                                    rs = input_resampler(in_rate, rate)
                                    resamplers[in_rate] = rs
                                samples = rs.resample_chunk(samples)
                            if len(samples):
                                await session.push_audio(samples, self._clock())
                            if pcm:
                                deadline = loop.time() + idle_s
                        case DtmfReceived(digit=digit):
                            log.info("audiosocket call %s: DTMF %s", parser.call_id, digit)
                        case HungUp():
                            log.info("audiosocket call %s: hangup", parser.call_id)
                            return
                        case ErrorReceived(code=code):
                            log.warning("audiosocket call %s: error frame (code %s)", parser.call_id, code)
                            return
        finally:
            if session is not None:
                await session.aclose()
            if transport is not None:
                await transport.aclose()
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.write(frame(Kind.HANGUP))

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
