"""WebSocketTransport and its Outbound queue on a fake socket (no models, no network).

The fake socket can be *stuck* (a client that stopped reading): ``send`` then
waits until it is released, as websockets' ``send`` does when TCP is full.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np

from voice_pipeline import events as ev
from voice_pipeline.edge.outbound import OVERFLOW_CLOSE_CODE, Outbound
from voice_pipeline.server.transport import WebSocketTransport

RATE = 16000


class FakeSocket:
    def __init__(self) -> None:
        self.sent: list[str | bytes] = []
        self.closed: tuple[int, str] | None = None
        self.open = asyncio.Event()
        self.open.set()

    async def send(self, message: str | bytes) -> None:
        await self.open.wait()
        self.sent.append(message)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(m) for m in self.sent if isinstance(m, str)]

    def kinds(self) -> list[str]:
        return [m["type"] for m in self.messages()]


class Clock:
    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += round(seconds * 1e9)


def make(
    *,
    reports: bool = False,
    max_events: int = 64,
    max_audio_s: float = 10.0,
    clock: Clock | None = None,
    grace_s: float = 0.5,
) -> tuple[FakeSocket, Outbound, WebSocketTransport, list[ev.Event]]:
    sock = FakeSocket()
    kw: dict[str, Any] = {"clock": clock} if clock is not None else {}
    out = Outbound(sock, max_events=max_events, max_audio_samples=round(max_audio_s * RATE), **kw)
    seen: list[ev.Event] = []
    transport = WebSocketTransport(
        out, RATE, playback_reports=reports, origin_ns=0, drain_grace_s=grace_s, on_event=seen.append, **kw
    )
    out.on_audio_sent = transport.audio_sent
    out.start()
    return sock, out, transport, seen


def pcm(seconds: float) -> np.ndarray:
    return np.full(round(seconds * RATE), 100, dtype=np.int16)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_events_go_out_in_order_and_reach_the_observer() -> None:
    sock, out, t, seen = make()
    t.emit(ev.SpeechStarted(1, 0))
    t.emit(ev.EndpointDetected(1, 0, 0))  # not part of the protocol
    t.emit(ev.TranscriptFinalized(1, 0, "hi"))
    await settle()
    assert sock.kinds() == ["speech.started", "transcript.final"]
    assert len(seen) == 3
    await out.aclose()


async def test_audio_is_a_header_then_its_binary_frame() -> None:
    sock, out, t, _ = make()
    await t.play(3, pcm(0.1))
    await settle()
    header, data = sock.sent
    assert isinstance(header, str) and isinstance(data, bytes)
    assert json.loads(header) == {"type": "assistant.audio", "turn_id": 3, "samples": 1600}
    assert np.array_equal(np.frombuffer(data, dtype="<i2"), pcm(0.1))
    await out.aclose()


async def test_clear_drops_queued_audio_and_says_so_once() -> None:
    sock, out, t, _ = make()
    sock.open.clear()  # the client is slow: audio queues up
    await t.play(1, pcm(0.1))
    await settle()  # the writer holds the first frame (mid-send)
    await t.play(1, pcm(0.2))
    await t.play(1, pcm(0.3))
    assert out.audio_queued_for(1) == round(0.5 * RATE)
    t.clear(1)
    t.clear(1)  # nothing sent since: not repeated
    assert out.audio_queued_for(1) == 0
    sock.open.set()
    await settle()
    assert sock.kinds() == ["assistant.audio", "audio.clear"]
    assert [len(m) // 2 for m in sock.sent if isinstance(m, bytes)] == [1600]
    await out.aclose()


async def test_audio_waiting_for_room_is_dropped_if_its_turn_is_cleared() -> None:
    sock, out, t, _ = make(max_audio_s=0.1)
    sock.open.clear()
    await t.play(1, pcm(0.1))
    await settle()
    await t.play(1, pcm(0.1))  # queued: the queue is now full
    late = asyncio.create_task(t.play(1, pcm(0.1)))
    await settle()
    assert not late.done()  # backpressure on the reply
    t.clear(1)
    await asyncio.wait_for(late, 5)
    sock.open.set()
    await settle()
    assert sock.kinds() == ["assistant.audio", "audio.clear"]
    await out.aclose()


async def test_a_client_that_stops_reading_is_closed_not_buffered() -> None:
    sock, out, t, _ = make(max_events=16)
    sock.open.clear()
    for i in range(100):
        t.emit(ev.AssistantTextStreamed(1, 0, f"w{i} "))
    await settle()
    assert out.overflowed and out.closed
    assert sock.closed is not None and sock.closed[0] == OVERFLOW_CLOSE_CODE
    await t.play(1, pcm(0.1))  # returns at once, queues nothing
    assert out.audio_queued == 0
    await out.aclose()


async def test_played_samples_follow_reports_and_the_exact_clear() -> None:
    clock = Clock()
    _, out, t, _ = make(reports=True, clock=clock)
    await t.play(1, pcm(1.0))
    await settle()
    clock.advance(0.3)
    t.report_playback(3000, None)
    assert t.played_samples(1) == 3000
    clock.advance(0.05)
    assert t.played_samples(1) == 3800  # extrapolated between reports
    t.clear(1)
    assert t.played_samples(1) == 3800
    t.report_playback(3500, cleared=1)  # where the client really stopped
    assert t.played_samples(1) == 3500
    await out.aclose()


async def test_without_reports_playback_is_estimated_in_real_time() -> None:
    clock = Clock()
    _, out, t, _ = make(reports=False, clock=clock)
    await t.play(1, pcm(1.0))
    await settle()
    clock.advance(0.25)
    assert t.played_samples(1) == 4000
    clock.advance(5)
    assert t.played_samples(1) == RATE
    await out.aclose()


async def test_drain_waits_for_the_listener_to_report_the_end() -> None:
    _, out, t, _ = make(reports=True, grace_s=60.0)
    await t.play(1, pcm(2.0))  # more than the timeline extrapolates without reports
    await settle()
    drained = asyncio.create_task(t.drain(1))
    await settle()
    assert not drained.done()
    t.report_playback(2 * RATE, None)
    await asyncio.wait_for(drained, 5)
    await out.aclose()


async def test_drain_without_reports_returns_after_the_audio_plays() -> None:
    _, out, t, _ = make(reports=False)
    await t.play(1, pcm(0.05))
    await asyncio.wait_for(t.drain(1), 5)
    assert t.played_samples(1) == round(0.05 * RATE)
    await out.aclose()


async def test_drain_gives_up_when_the_connection_is_gone() -> None:
    sock, out, t, _ = make(reports=True, grace_s=60.0)
    sock.open.clear()
    await t.play(1, pcm(5.0))
    drained = asyncio.create_task(t.drain(1))
    await settle()
    await out.aclose()
    await asyncio.wait_for(drained, 5)


async def test_aclose_is_idempotent_and_stops_sending() -> None:
    sock, out, t, _ = make()
    await out.aclose()
    await out.aclose()
    t.emit(ev.SpeechStarted(1, 0))
    await settle()
    assert sock.sent == []
