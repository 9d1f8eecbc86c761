"""The edge: what every way into the pipeline shares, so each edge keeps only its protocol.

Edges today: the file runner (:mod:`voice_pipeline.runner`), ``/ws``
(:mod:`voice_pipeline.server.connection`), ``/twilio``
(:mod:`voice_pipeline.telephony.twilio_connection`) and AudioSocket
(:mod:`voice_pipeline.telephony.audiosocket_server`). The pieces:

* :class:`SessionScope` -- one edge's session: it builds the
  :class:`~voice_pipeline.conversation.session.Session` once the edge knows its transport
  (:meth:`~SessionScope.open`, or :meth:`~SessionScope.adopt` for one built
  otherwise), runs the idle deadline (:meth:`~SessionScope.receive`: the next
  message, or :data:`IDLE` once nothing moved the deadline for
  ``server.idle_timeout_s``), pushes the peer's audio in
  (:meth:`~SessionScope.push_audio`, which also moves the deadline) and closes in
  one order (:meth:`~SessionScope.aclose`: the session -- its turns cancelled,
  the LLM aborted -- then the transport's writer, then whatever else the edge
  registered). :meth:`~SessionScope.run` wraps an edge's receive loop: the peer
  leaving is an end, a bug is logged and the peer told, and the scope is closed
  whatever happened.
* :class:`InputAudio` -- int16 audio at whatever rate the peer sends (one soxr
  stream per rate, so a rate may change mid-call) to float32 at the pipeline
  rate, stamped with the moment it arrived.
* :func:`drain_until` -- "wait until the listener has played the turn, at most
  its duration plus a grace": the decision is :class:`DrainDeadline` (pure), the
  edge's transport supplies what is unplayed and how to wait for a change.
* :class:`SessionLimit` and :class:`EdgeMetrics` -- the server's ``max_sessions``,
  shared by every edge it runs (AudioSocket's calls included), and where edges
  report: sessions opened, closed and refused, and every session event (turns,
  budgets) for ``/metrics``. :class:`~voice_pipeline.server.metrics.ServerMetrics`
  is one; this module needs none of the server.

Two submodules serve the WebSocket edges (``/ws`` and ``/v1/realtime``), so that
neither the server nor the realtime protocol imports the other:
:mod:`~voice_pipeline.edge.outbound` (one connection's bounded send queue and its
writer task) and :mod:`~voice_pipeline.edge.playback` (what a remote listener has
played of each reply).

A new edge, in outline (the realtime endpoint can take this shape)::

    scope = SessionScope(engines, cfg, clock=clock, label="session")
    scope.close_after(outbound.aclose)          # anything that outlives the session
    async def serve() -> None:
        while (msg := await scope.receive(ws.recv)) is not IDLE:
            ...                                  # parse; on the start message:
            scope.open(transport, aclose=transport.aclose)   # or scope.adopt(session)
            ...                                  # on audio:
            await scope.push_audio(pcm, rate_hz)
        await ws.close(1000, "idle")
    await scope.run(serve, gone=(ConnectionClosed,), on_error=lambda: ws.close(1011, "internal"))

and, on a server, ``limit.acquire()`` before the connection is served (False: refuse
it), ``limit.release()`` after, and ``limit.metrics.observe`` as the transport's
``on_event``. An edge for which every message is activity (not only audio) calls
``scope.active()`` after each; one whose audio arrives already converted pushes it
with ``session.push_audio`` itself; tasks of its own (cancel them) and its writer
go in ``close_after``, in the order they must close.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, TypeVar

import soxr

from voice_pipeline import events as ev
from voice_pipeline.audio import Float32, Int16, input_resampler, to_float32
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config
from voice_pipeline.conversation.session import Session
from voice_pipeline.engines import Engines
from voice_pipeline.transport import Transport

log = logging.getLogger(__name__)

T = TypeVar("T")
Close = Callable[[], Awaitable[None]]

#: the shortest wait of :func:`drain_until` between two looks
MIN_WAIT_S = 0.01


# ---------------------------------------------------------------- sessions of a server


class EdgeMetrics(Protocol):
    """Where an edge reports (the server's ``/metrics``)."""

    def observe(self, event: ev.Event) -> None: ...

    def session_opened(self) -> None: ...

    def endpoint_opened(self, endpoint: str) -> None: ...

    def session_closed(self) -> None: ...

    def session_refused(self, reason: str) -> None: ...


class _NoMetrics:
    def observe(self, event: ev.Event) -> None:
        pass

    def session_opened(self) -> None:
        pass

    def endpoint_opened(self, endpoint: str) -> None:
        pass

    def session_closed(self) -> None:
        pass

    def session_refused(self, reason: str) -> None:
        pass


NO_METRICS: EdgeMetrics = _NoMetrics()


class SessionLimit:
    """At most ``max_sessions`` sessions at once, over every edge that shares this object;
    each session opened, closed or refused (reason ``"limit"``) is reported to ``metrics``."""

    def __init__(self, max_sessions: int, metrics: EdgeMetrics = NO_METRICS) -> None:
        self.max_sessions = max_sessions
        self.metrics = metrics
        self.active = 0

    def acquire(self) -> bool:
        """Take a slot for a new session; False (counted as refused) when none is free."""
        if self.active >= self.max_sessions:
            self.metrics.session_refused("limit")
            return False
        self.active += 1
        self.metrics.session_opened()
        return True

    def release(self) -> None:
        """The session of a slot :meth:`acquire` gave has ended."""
        self.active -= 1
        self.metrics.session_closed()


# ---------------------------------------------------------------- audio in


class InputAudio:
    """The peer's audio as the session wants it: float32 at the pipeline rate."""

    def __init__(self, pipeline_rate_hz: int, *, clock: Callable[[], int] = now_ns) -> None:
        self.rate_hz = pipeline_rate_hz
        self._clock = clock
        self._resamplers: dict[int, soxr.ResampleStream] = {}

    def convert(self, pcm: Int16, rate_hz: int) -> Float32:
        """``pcm`` at ``rate_hz``, resampled by that rate's own stream (it keeps its state
        across chunks; none at the pipeline rate)."""
        samples = to_float32(pcm)
        if rate_hz == self.rate_hz:
            return samples
        stream = self._resamplers.get(rate_hz)
        if stream is None:
            stream = self._resamplers[rate_hz] = input_resampler(rate_hz, self.rate_hz)
        resampled: Float32 = stream.resample_chunk(samples)
        return resampled

    async def push(self, session: Session, pcm: Int16, rate_hz: int) -> None:
        """Convert ``pcm`` and push it into ``session``, stamped with the moment it arrived."""
        samples = self.convert(pcm, rate_hz)
        if len(samples):
            await session.push_audio(samples, self._clock())


# ---------------------------------------------------------------- one edge's session


class Idle(enum.Enum):
    IDLE = "idle"


#: what :meth:`SessionScope.receive` returns once the idle deadline has passed
IDLE = Idle.IDLE


class SessionScope:
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
        self.input = InputAudio(cfg.audio.pipeline_rate_hz, clock=clock)
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
        """The peer's audio into the session (:class:`InputAudio`); audio, however short,
        is activity (other messages are not, unless the edge calls :meth:`active`)."""
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


# ---------------------------------------------------------------- draining a turn


class Drained(enum.Enum):
    """How :func:`drain_until` ended."""

    PLAYED = "played"  # the listener has played it all
    TIMED_OUT = "timed_out"  # not confirmed within the audio's duration plus the grace
    CLOSED = "closed"  # the connection is gone


@dataclass(slots=True)
class DrainDeadline:
    """When to stop waiting for a listener to play a turn out (pure; times in ns)."""

    rate_hz: int
    grace_s: float
    #: set at the first look: then + the unplayed audio's duration + ``grace_s``
    deadline_ns: int | None = None

    def step(self, now_ns: int, unplayed: int) -> Drained | float:
        """``PLAYED`` once nothing is unplayed, ``TIMED_OUT`` at the deadline, else the
        seconds to wait before looking again: until the audio should have played, at most
        to the deadline, at least :data:`MIN_WAIT_S`."""
        if unplayed <= 0:
            return Drained.PLAYED
        left_s = unplayed / self.rate_hz
        if self.deadline_ns is None:
            self.deadline_ns = now_ns + round((left_s + self.grace_s) * 1e9)
        if now_ns >= self.deadline_ns:
            return Drained.TIMED_OUT
        return max(MIN_WAIT_S, min(left_s, (self.deadline_ns - now_ns) / 1e9))


async def drain_until(
    unplayed: Callable[[int], int],
    changed: Callable[[float], Awaitable[None]],
    *,
    closed: Callable[[], bool],
    rate_hz: int,
    grace_s: float,
    clock: Callable[[], int] = now_ns,
) -> Drained:
    """Wait until ``unplayed(now)`` (samples at ``rate_hz`` sent but not played) is 0, at
    most its duration plus ``grace_s`` (a listener that stopped playing or confirming),
    or until ``closed()``. ``changed(timeout_s)`` returns when something may have changed
    (audio sent, a report or mark, a clear), or after ``timeout_s``."""
    deadline = DrainDeadline(rate_hz, grace_s)
    while not closed():
        now = clock()
        step = deadline.step(now, unplayed(now))
        if isinstance(step, Drained):
            return step
        await changed(step)
    return Drained.CLOSED
