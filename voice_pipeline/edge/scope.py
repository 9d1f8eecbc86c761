"""One edge's session: built on the edge's transport, the idle deadline, audio in, one order of closing."""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from voice_pipeline.audio import Int16
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config
from voice_pipeline.conversation.session import Session
from voice_pipeline.edge.peer_audio import PeerAudio
from voice_pipeline.engines import Engines
from voice_pipeline.transport import Transport

log = logging.getLogger(__name__)

T = TypeVar("T")
Close = Callable[[], Awaitable[None]]


class Idle(enum.Enum):
    IDLE = "idle"


#: what :meth:`SessionScope.receive` returns once the idle deadline has passed
IDLE = Idle.IDLE


class SessionScope:
    """One edge's session and what closes with it (see :mod:`voice_pipeline.edge`)."""

    def __init__(
        self,
        engines: Engines,
        cfg: Config,
        *,
        clock: Callable[[], int] = now_ns,
        idle_s: float | None = None,
        label: str = "session",
    ) -> None:
        """``idle_s``: default ``server.idle_timeout_s``. ``label`` names the session in
        the log (``"call"`` ...), with :attr:`session_id`."""
        self._engines = engines
        self._cfg = cfg
        self._clock = clock
        self.idle_s = cfg.server.idle_timeout_s if idle_s is None else idle_s
        self.label = label
        self.session_id = secrets.token_hex(8)
        self.input = PeerAudio(cfg.audio.pipeline_rate_hz, clock=clock)
        self.session: Session | None = None
        self._closers: list[Close] = []
        self._deadline: float | None = None  # loop time; set by the first receive
        self._closed = False

    # ------------------------------------------------------------ the session

    def open(self, transport: Transport, *, aclose: Close | None = None) -> Session:
        """Build the session on ``transport``; ``aclose`` (the transport's writer) is closed
        right after it. With telemetry, the session is traced (its events pass by its trace)."""
        if self._engines.telemetry is not None:
            transport = self._engines.telemetry.observe(transport, self)
        return self.adopt(Session(self._engines, self._cfg, transport, clock=self._clock), aclose=aclose)

    def adopt(self, session: Session, *, aclose: Close | None = None) -> Session:
        """Own a session built by the edge itself (closed by :meth:`aclose`, then ``aclose``)."""
        assert self.session is None, "one session per scope"
        self.session = session
        if aclose is not None:
            self._closers.insert(0, aclose)
        return session

    def close_after(self, aclose: Close) -> None:
        """Close ``aclose`` after the session (and the transport), in the order registered."""
        self._closers.append(aclose)

    # ------------------------------------------------------------ the peer's messages

    def active(self) -> None:
        """The peer did something that counts as activity: the idle deadline moves on."""
        self._deadline = asyncio.get_running_loop().time() + self.idle_s

    async def receive(self, recv: Callable[[], Awaitable[T]]) -> T | Idle:
        """``await recv()``, or :data:`IDLE` once the idle deadline passes first."""
        if self._deadline is None:
            self.active()
        assert self._deadline is not None
        try:
            async with asyncio.timeout_at(self._deadline):
                return await recv()
        except TimeoutError:
            return IDLE

    async def push_audio(self, pcm: Int16, rate_hz: int) -> None:
        """The peer's audio into the session (:class:`~voice_pipeline.edge.peer_audio.PeerAudio`);
        audio, however short, is activity (other messages are not, unless the edge calls
        :meth:`active`)."""
        assert self.session is not None, "open() first"
        await self.input.push(self.session, pcm, rate_hz)
        if len(pcm):
            self.active()

    # ------------------------------------------------------------ the end

    async def run(
        self,
        serve: Callable[[], Awaitable[None]],
        *,
        gone: tuple[type[Exception], ...] = (),
        on_error: Close | None = None,
    ) -> None:
        """Run the edge's loop, then :meth:`aclose`, whatever ended it. An exception in
        ``gone`` (the peer left) ends it like a return; any other is logged and
        ``on_error`` tells the peer; neither escapes. Cancellation does, after the close."""
        try:
            await serve()
        except gone:
            pass
        except Exception:
            log.exception("%s %s failed", self.label, self.session_id)
            if on_error is not None:
                await on_error()
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Close the session (cancelling its turns), then the writers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.session is not None:
            await self.session.aclose()
        for close in self._closers:
            await close()

    async def __aenter__(self) -> SessionScope:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
