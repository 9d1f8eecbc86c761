"""Long calls keep memory bounded: the soak (benchmarks/soak.py) shortened, and each cap.

The soak runs a simulated conversation (a turn every 8 s, every third one a
barge-in) through a session and the server's WebSocket transport on a fake
clock; here 3 simulated minutes. Every structure that could grow with the
length of a call is measured each simulated 30 s and must stay under its cap:
lengths, not wall time. The caps themselves are then proven one by one by
pushing far more turns than they keep (``benchmarks/soak.py --minutes 60`` is
the full hour).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np
import pytest
from fakes import FakeClock
from speech import espeak

from voice_pipeline.config import BudgetConfig
from voice_pipeline.edge.outbound import Outbound
from voice_pipeline.edge.playback import ListenerTimeline
from voice_pipeline.engines import Engines
from voice_pipeline.ledger.aggregate import KEEP_RECORDS, KEEP_SAMPLES, SessionLedger
from voice_pipeline.ledger.records import TurnRecord, WorkAccount
from voice_pipeline.server.transport import WebSocketTransport
from voice_pipeline.telephony.audiosocket_server import AudioSocketTransport
from voice_pipeline.telephony.twilio_transport import TwilioTransport

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import soak

#: structure -> the most it may hold at any time, however long the call
CAPS = {
    "input_chunks": 4 * 50 + 2,  # 4 s of 20 ms chunks
    "session_turns_open": 3,
    "session_replies": 2,
    "session_tasks": 8,
    "echo_reference_chunks": 40,  # 10 s of reply clauses
    "timeline_chunks": 40,
    "timeline_turns": 64,
    "timeline_cuts": 8,
    "transport_turn_epochs": 64,
    "outbound_queue": 64,
    "asyncio_tasks": 12,
    "ledger_records": KEEP_RECORDS,
    "ledger_stage_samples": KEEP_SAMPLES,
}


async def test_a_simulated_call_keeps_every_structure_bounded() -> None:
    samples = await soak.soak(3.0, every_s=30.0)
    assert len(samples) == 6
    for s in samples:
        print(f"{s.simulated_s:5.0f} s rss {s.rss_mb:6.1f} MB {s.sizes}")
        for name, cap in CAPS.items():
            assert s.sizes[name] <= cap, (s.simulated_s, name, s.sizes[name])
        assert s.sizes["ledger_records"] == min(s.sizes["turns_completed"], KEEP_RECORDS)
    first, last = samples[0], samples[-1]
    assert last.sizes["turns_completed"] >= 20  # the conversation really went on
    assert last.sizes["transport_turn_epochs"] >= 3  # with barge-ins (audio.clear)
    # what is not a per-turn count does not grow with the call
    for name in ("input_chunks", "timeline_chunks", "timeline_cuts", "session_tasks", "asyncio_tasks"):
        assert last.sizes[name] <= max(first.sizes[name], CAPS[name])


# ---------------------------------------------------------------- each cap, far past it


def record(turn_id: int) -> TurnRecord:
    stages = {"voice_to_voice": float(turn_id % 700), "endpointing": 300.0}
    return TurnRecord(
        turn_id, "q", "a", "a", False, {}, stages, (), WorkAccount(0, 0.0, 0.0, 0, 0), 0.0, False
    )


def test_the_session_ledger_keeps_aggregates_not_every_record() -> None:
    ledger = SessionLedger(BudgetConfig())
    turns = KEEP_SAMPLES + KEEP_RECORDS + 500
    for i in range(1, turns + 1):
        ledger.add(record(i))
    assert ledger.turns == turns
    assert len(ledger.records) == KEEP_RECORDS
    assert ledger.records[-1].turn_id == turns and ledger.records[0].turn_id == turns - KEEP_RECORDS + 1
    summary = ledger.summary()
    assert summary["voice_to_voice"]["n"] == turns  # counted over every turn
    assert summary["endpointing"]["p50"] == 300.0
    assert all(len(a.recent) == KEEP_SAMPLES for a in ledger.stages.values())
    assert ledger.stages["voice_to_voice"].max_ms == 699.0


def test_the_listener_timeline_forgets_finished_turns() -> None:
    timeline = ListenerTimeline(16000, reports=True)
    t = 1_000_000_000
    for turn in range(1, 1001):
        timeline.sent(turn, 1600, t)
        if turn % 3 == 0:
            timeline.cut(turn, t)
        t += 200_000_000
        timeline.report(timeline.tail, t, turn if turn % 3 == 0 else None)
    assert len(timeline._chunks) <= 2
    assert len(timeline._folded) <= 64 and len(timeline._cuts) <= 8
    assert timeline.played(1000, t) == 1600  # the latest turns are still exact


class NullSocket:
    async def send(self, message: str | bytes) -> None:
        pass

    async def close(self, code: int = 1000, reason: str = "") -> None:
        pass


async def test_the_websocket_transport_keeps_the_latest_turns_books() -> None:
    clock = FakeClock()
    out = Outbound(NullSocket(), max_events=1024, max_audio_samples=10**9, clock=clock)
    transport = WebSocketTransport(
        out, 16000, playback_reports=True, origin_ns=clock(), drain_grace_s=0.1, clock=clock
    )
    out.on_audio_sent = transport.audio_sent
    out.start()
    try:
        for turn in range(1, 501):
            await transport.play(turn, np.ones(320, dtype=np.int16))
            await asyncio.sleep(0)
            transport.clear(turn)
            clock.advance_ms(100)
            transport.report_playback(transport.timeline.tail, turn)
        assert len(transport._epoch) <= 64 and len(transport._unflushed) <= 1
        assert len(transport.timeline._folded) <= 64
    finally:
        await out.aclose()


class Writer:
    """The part of ``asyncio.StreamWriter`` the AudioSocket transport uses."""

    def __init__(self) -> None:
        self.frames = 0

    def write(self, data: bytes) -> None:
        self.frames += 1

    async def drain(self) -> None:
        await asyncio.sleep(0)


async def test_the_audiosocket_transport_folds_played_frames_out_of_its_log() -> None:
    clock = FakeClock()
    transport = AudioSocketTransport(Writer(), lead_ms=10_000_000, clock=clock, max_queued_s=1000)  # type: ignore[arg-type]
    transport.start()
    try:
        for turn in (1, 2):
            await transport.play(turn, np.ones(8000 * 30, dtype=np.int16))  # 30 s of reply, 1500 frames
            for _ in range(200):
                await asyncio.sleep(0)
                clock.advance_ms(200)
                transport.played_samples(turn)
            while transport.pacer._items or transport.frames_sent < 1500 * turn:  # noqa: ASYNC110
                await asyncio.sleep(0)
            clock.advance_ms(40_000)
            assert transport.played_samples(turn) == 8000 * 30  # all of it heard, exactly
            assert len(transport.pacer._log.get(turn, ())) <= 2  # not one entry per 20 ms frame
    finally:
        await transport.aclose()


@pytest.mark.parametrize("turns", [200])
async def test_the_audiosocket_transport_keeps_the_latest_turns(turns: int) -> None:
    clock = FakeClock()
    transport = AudioSocketTransport(Writer(), lead_ms=10_000_000, clock=clock)  # type: ignore[arg-type]
    transport.start()
    try:
        for turn in range(1, turns + 1):
            await transport.play(turn, np.ones(320, dtype=np.int16))
            while transport.pacer._items or transport.frames_sent < turn:  # noqa: ASYNC110
                await asyncio.sleep(0)
            clock.advance_ms(100)
            transport.clear(turn)
        p = transport.pacer
        books = (p._queued_pos, p._floor, p._played, p._epoch, p._log)
        assert all(len(b) <= 66 for b in books), [len(b) for b in books]
    finally:
        await transport.aclose()


async def test_the_twilio_transport_forgets_marks_never_echoed_and_old_turns() -> None:
    clock = FakeClock()
    sent: list[str] = []

    async def send(text: str) -> None:
        sent.append(text)

    transport = TwilioTransport(send, "MZsoak", lead_ms=10_000_000, mark_every_frames=1, clock=clock)
    transport.start()
    try:
        for turn in range(1, 201):  # 200 replies of 10 frames, a mark after each: none echoed
            await transport.play(turn, np.ones(1600, dtype=np.int16))
            while transport.pacer._items:  # noqa: ASYNC110 -- the writer drains it
                await asyncio.sleep(0)
            clock.advance_ms(200)
        await asyncio.sleep(0)
        assert transport.frames_sent == 2000
        assert len(transport.pacer._pending) <= 512  # a far end that never echoes cannot grow them
        p = transport.pacer
        books = (p._queued_pos, p._played, p._epoch)  # _played: the echoed marks
        assert all(len(b) <= 66 for b in books), [len(b) for b in books]
        last = next(reversed(p._pending))
        transport.mark_played(last)  # the latest marks are still understood
        assert transport.played_samples(200) == 1600
    finally:
        await transport.aclose()


@pytest.mark.real_models
async def test_a_simulated_call_with_the_real_models_keeps_every_structure_bounded(engines: Engines) -> None:
    """The same, with Silero, Whisper, vLLM and Piper and a spoken question each turn (the fake
    clock waits for each reply to begin, as a caller would)."""
    samples = await soak.soak(2.0, every_s=30.0, engines=engines, speech=espeak(soak.QUESTION))
    for s in samples:
        print(f"{s.simulated_s:5.0f} s rss {s.rss_mb:6.1f} MB {s.sizes}")
        for name, cap in CAPS.items():
            assert s.sizes[name] <= cap, (s.simulated_s, name, s.sizes[name])
    last = samples[-1].sizes
    assert last["turns_completed"] >= 10 and last["timeline_turns"] >= 5  # answers were heard
