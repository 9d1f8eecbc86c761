"""The pieces every edge shares (voice_pipeline/edge/), on fakes: no models, no network.

The drain decision is pure (table); the loop around it runs on a fake clock. The
session scope runs on the fake engines with a recording transport.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import numpy as np
import pytest
from fakes import FakeClock, Fakes, RecordingTransport, tone

from voice_pipeline import events as ev
from voice_pipeline.config import Config, ServerConfig
from voice_pipeline.edge import (
    IDLE,
    MIN_WAIT_S,
    NO_METRICS,
    DrainDeadline,
    Drained,
    PeerAudio,
    SessionLimit,
    SessionScope,
    drain_until,
)
from voice_pipeline.errors import ClosedError

S = 1_000_000_000


# ---------------------------------------------------------------- the drain decision


@pytest.mark.parametrize(
    ("looks", "expected"),
    [
        # (now in s, samples unplayed at 1000 Hz) -> the answer at each look; grace 0.5 s
        ([(0.0, 0)], [Drained.PLAYED]),
        ([(0.0, 1000), (1.0, 0)], [1.0, Drained.PLAYED]),  # wait until it should have played
        ([(0.0, 1000), (1.0, 100), (1.1, 0)], [1.0, 0.1, Drained.PLAYED]),
        ([(0.0, 1000), (1.2, 900)], [1.0, 0.3]),  # at most to the deadline (0 + 1 + 0.5 s)
        ([(0.0, 1000), (1.5, 900)], [1.0, Drained.TIMED_OUT]),  # the deadline is set once
        ([(0.0, 1000), (1.495, 2)], [1.0, MIN_WAIT_S]),  # never a busy loop
        ([(0.0, 5), (0.005, 5)], [MIN_WAIT_S, MIN_WAIT_S]),
    ],
)
def test_the_drain_deadline(looks: list[tuple[float, int]], expected: list[Drained | float]) -> None:
    deadline = DrainDeadline(1000, 0.5)
    answers = [deadline.step(round(t * S), unplayed) for t, unplayed in looks]
    assert answers == [a if isinstance(a, Drained) else pytest.approx(a) for a in expected]


async def test_drain_until_waits_for_changes_and_gives_up_at_the_deadline() -> None:
    clock = FakeClock()
    t0 = clock()
    waits: list[float] = []

    async def changed(timeout_s: float) -> None:  # nothing ever changes: time passes
        waits.append(timeout_s)
        clock.advance(round(timeout_s * S))

    outcome = await drain_until(
        lambda now: 800, changed, closed=lambda: False, rate_hz=1000, grace_s=0.5, clock=clock
    )
    assert outcome is Drained.TIMED_OUT
    assert clock() - t0 == round(1.3 * S)  # the audio's 0.8 s + the grace
    assert waits == pytest.approx([0.8, 0.5])


async def test_drain_until_returns_once_played_or_closed() -> None:
    clock = FakeClock()
    left = [300]

    async def changed(timeout_s: float) -> None:  # the listener plays 100 samples a look
        left[0] -= 100
        clock.advance(round(0.1 * S))

    assert (
        await drain_until(
            lambda now: left[0], changed, closed=lambda: False, rate_hz=1000, grace_s=0, clock=clock
        )
        is Drained.PLAYED
    )
    assert left == [0]
    closed = await drain_until(
        lambda now: 5, changed, closed=lambda: True, rate_hz=1000, grace_s=0, clock=clock
    )
    assert closed is Drained.CLOSED


# ---------------------------------------------------------------- input audio


class PushLog:
    """The part of a session PeerAudio pushes into."""

    def __init__(self) -> None:
        self.pushed: list[tuple[int, int]] = []  # (samples, t_ns)

    async def push_audio(self, samples: np.ndarray, t_ns: int | None = None) -> None:
        assert samples.dtype == np.float32 and t_ns is not None
        self.pushed.append((len(samples), t_ns))


def pcm(seconds: float, rate_hz: int) -> np.ndarray:
    return (tone(seconds, rate_hz=rate_hz) * 20000).astype(np.int16)


def test_input_at_the_pipeline_rate_is_only_converted() -> None:
    audio = PeerAudio(16000)
    x = pcm(0.1, 16000)
    out = audio.convert(x, 16000)
    assert out.dtype == np.float32 and np.allclose(out, x / 32768.0)


def test_each_input_rate_keeps_its_own_resampler_across_chunks() -> None:
    audio = PeerAudio(16000)
    got = {8000: 0, 48000: 0}
    for _ in range(50):  # 1 s of each, in 20 ms chunks, interleaved (a rate change mid-call)
        for rate in got:
            got[rate] += len(audio.convert(pcm(0.02, rate), rate))
    for rate, n in got.items():
        assert 15000 <= n <= 16000, (rate, n)  # 1 s at 16 kHz, less what the filter holds back


async def test_input_is_stamped_with_when_it_arrived() -> None:
    clock = FakeClock()
    audio = PeerAudio(16000, clock=clock)
    log = PushLog()
    await audio.push(log, pcm(0.02, 16000), 16000)  # type: ignore[arg-type]
    clock.advance(5_000_000)
    await audio.push(log, pcm(0.02, 16000), 16000)  # type: ignore[arg-type]
    assert log.pushed == [(320, clock() - 5_000_000), (320, clock())]


# ---------------------------------------------------------------- the session scope


def config(idle_s: float = 30.0) -> Config:
    return Config(server=ServerConfig(idle_timeout_s=idle_s))


def scope_and_transport(idle_s: float = 30.0) -> tuple[SessionScope, RecordingTransport]:
    clock = FakeClock()
    return SessionScope(Fakes().engines(), config(idle_s), clock=clock), RecordingTransport(clock)


async def test_receive_returns_idle_when_nothing_moves_the_deadline() -> None:
    scope, transport = scope_and_transport(idle_s=0.2)
    scope.open(transport)
    never = asyncio.Event()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await scope.receive(never.wait) is IDLE
    elapsed = loop.time() - t0
    print(f"idle after {elapsed:.3f} s (idle_timeout_s 0.2)")
    assert 0.2 <= elapsed + 0.01 < 30.0  # not before the deadline; the upper bound catches a hang
    await scope.aclose()


async def test_audio_moves_the_idle_deadline_and_other_messages_do_not() -> None:
    """Structural, on the loop's own clock: idle comes no sooner than idle_s after the last
    audio (audio moved the deadline), and while other messages were still arriving (they
    did not). The peer's audio is 50 ms apart against a 1 s deadline, so even a loaded
    machine keeps it alive through the audio."""
    scope, transport = scope_and_transport(idle_s=1.0)
    scope.open(transport)
    messages: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    audio_at: list[float] = []
    first_deadline = loop.time() + 1.0

    async def peer() -> None:
        while loop.time() < first_deadline + 0.3:  # audio past the first deadline: it moved on
            await asyncio.sleep(0.05)
            await scope.push_audio(pcm(0.02, 16000), 16000)
            audio_at.append(loop.time())
            messages.put_nowait("audio")
        while True:  # then only other messages: they do not keep it alive
            await asyncio.sleep(0.05)
            messages.put_nowait("dtmf")

    task = asyncio.create_task(peer())
    seen = []
    while (msg := await scope.receive(messages.get)) is not IDLE:
        seen.append(msg)
    idle_at = loop.time()
    assert not task.done()  # idle while the other messages still came
    task.cancel()
    n_audio = len(audio_at)
    assert seen[:n_audio] == ["audio"] * n_audio and seen[n_audio:] and set(seen[n_audio:]) == {"dtmf"}
    assert audio_at[-1] > first_deadline  # the audio went on past the first deadline ...
    assert idle_at >= audio_at[-1] + 1.0 - 0.01  # ... and idle came a full idle_s after the last
    print(
        f"{n_audio} audio, {len(seen) - n_audio} other messages; "
        f"idle {idle_at - audio_at[-1]:.3f} s after the last audio"
    )
    await scope.push_audio(np.zeros(0, dtype=np.int16), 16000)  # empty audio is not activity

    async def answer_soon() -> str:  # answers long before a fresh deadline would pass
        await asyncio.sleep(0.05)
        return "late"

    assert await scope.receive(answer_soon) is IDLE  # the deadline had passed already
    await scope.aclose()


async def test_the_close_order_is_session_then_transport_then_the_rest_once() -> None:
    scope, transport = scope_and_transport()
    order: list[str] = []

    def closer(name: str) -> Callable[[], Awaitable[None]]:
        async def close() -> None:
            assert scope.session is not None
            with pytest.raises(ClosedError):  # the session is closed before anything else
                await scope.session.push_audio(np.zeros(160, dtype=np.float32))
            order.append(name)

        return close

    scope.close_after(closer("outbound"))
    session = scope.open(transport, aclose=closer("transport"))
    assert scope.session is session
    await scope.push_audio(pcm(0.1, 8000), 8000)
    await scope.aclose()
    await scope.aclose()
    assert order == ["transport", "outbound"]


async def test_a_scope_without_a_session_still_closes_the_rest() -> None:
    scope, _ = scope_and_transport()
    closed: list[bool] = []

    async def close() -> None:
        closed.append(True)

    scope.close_after(close)
    async with scope:
        pass
    assert closed == [True] and scope.session is None


async def test_a_built_session_can_be_adopted() -> None:
    scope, transport = scope_and_transport()
    other, _ = scope_and_transport()
    session = other.open(transport)
    assert scope.adopt(session) is session
    await scope.aclose()
    with pytest.raises(ClosedError):
        await session.push_audio(np.zeros(160, dtype=np.float32))


class PeerGone(Exception):
    pass


async def test_run_ends_quietly_when_the_peer_leaves(caplog: pytest.LogCaptureFixture) -> None:
    scope, transport = scope_and_transport()
    told: list[bool] = []

    async def serve() -> None:
        scope.open(transport)
        raise PeerGone

    async def on_error() -> None:
        told.append(True)

    await scope.run(serve, gone=(PeerGone,), on_error=on_error)
    assert not told and not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert scope.session is not None
    with pytest.raises(ClosedError):
        await scope.session.push_audio(np.zeros(160, dtype=np.float32))


async def test_run_logs_a_failure_tells_the_peer_and_closes(caplog: pytest.LogCaptureFixture) -> None:
    scope, transport = scope_and_transport()
    scope.label = "call"
    told: list[bool] = []

    async def serve() -> None:
        scope.open(transport)
        raise RuntimeError("a bug")

    async def on_error() -> None:
        told.append(True)

    await scope.run(serve, on_error=on_error)  # never raises
    assert told == [True]
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.getMessage() == f"call {scope.session_id} failed"
    with pytest.raises(ClosedError):
        assert scope.session is not None
        await scope.session.push_audio(np.zeros(160, dtype=np.float32))


async def test_run_lets_cancellation_through_after_closing() -> None:
    scope, transport = scope_and_transport()
    started = asyncio.Event()

    async def serve() -> None:
        scope.open(transport)
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(scope.run(serve))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert scope.session is not None
    with pytest.raises(ClosedError):
        await scope.session.push_audio(np.zeros(160, dtype=np.float32))


# ---------------------------------------------------------------- the session limit


class Metrics:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def observe(self, event: ev.Event) -> None:
        self.calls.append(type(event).__name__)

    def session_opened(self) -> None:
        self.calls.append("opened")

    def endpoint_opened(self, endpoint: str) -> None:
        self.calls.append(f"opened on {endpoint}")

    def session_closed(self) -> None:
        self.calls.append("closed")

    def session_refused(self, reason: str) -> None:
        self.calls.append(f"refused {reason}")


def test_the_limit_counts_over_every_edge_that_shares_it_and_reports() -> None:
    metrics = Metrics()
    limit = SessionLimit(2, metrics)
    assert limit.acquire() and limit.acquire()
    assert not limit.acquire() and limit.active == 2
    limit.release()
    assert limit.acquire()
    limit.release()
    limit.release()
    assert limit.active == 0
    assert metrics.calls == ["opened", "opened", "refused limit", "closed", "opened", "closed", "closed"]


def test_a_limit_of_zero_refuses_everyone_and_no_metrics_is_fine() -> None:
    limit = SessionLimit(0)
    assert limit.metrics is NO_METRICS and not limit.acquire() and limit.active == 0
