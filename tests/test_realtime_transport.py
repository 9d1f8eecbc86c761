"""The /v1/realtime transport on a fake socket (no models, no network): reply audio as
``response.output_audio.delta`` text frames queued as audio -- droppable on a barge-in,
counted on the playout timeline -- and ``output_audio_buffer.started`` once it is written."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
from realtime_support import PROFILE
from test_server_transport import Clock, FakeSocket

from voice_pipeline import events as ev
from voice_pipeline.config import Config
from voice_pipeline.edge.outbound import Outbound
from voice_pipeline.realtime.bridge import RealtimeBridge
from voice_pipeline.realtime.event_json import ServerEventEncoder
from voice_pipeline.realtime.ids import Ids
from voice_pipeline.realtime.session_config import SessionBase
from voice_pipeline.realtime.transport import RealtimeTransport

T = 1_000_000_000


def make(clock: Clock) -> tuple[RealtimeTransport, Outbound, FakeSocket]:
    ws = FakeSocket()
    out = Outbound(ws, max_events=256, max_audio_samples=24000 * 10, clock=clock)
    ids = Ids("t")
    bridge = RealtimeBridge(PROFILE, SessionBase.of(Config()), ids, origin_ns=0)
    transport = RealtimeTransport(out, bridge, ServerEventEncoder(ids), drain_grace_s=0.5, clock=clock)
    out.on_audio_sent = transport.audio_sent
    return transport, out, ws


def answered(transport: RealtimeTransport) -> None:
    for event in (
        ev.SpeechStarted(1, T, 0),
        ev.EndpointDetected(1, T, T, 1000),
        ev.TranscriptFinalized(1, T, "hi"),
        ev.ReplyStarted(1, T),
        ev.ClauseSynthesized(1, T, "Hello there.", 24000),
    ):
        transport.emit(event)


def kinds(ws: FakeSocket) -> list[str]:
    return [json.loads(m)["type"] for m in ws.sent if isinstance(m, str)]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_reply_audio_goes_out_as_deltas_on_the_timeline() -> None:
    clock = Clock()
    transport, out, ws = make(clock)
    answered(transport)
    out.start()
    await transport.play(1, np.full(24000, 1000, np.int16))
    await settle()
    sent = kinds(ws)
    assert sent.count("response.output_audio.delta") == 5
    assert sent.count("output_audio_buffer.started") == 1
    assert transport.timeline.remaining(1, clock()) == 24000  # nothing played yet
    clock.advance(0.5)
    assert transport.played_samples(1) == 12000
    clock.advance(0.6)
    await asyncio.wait_for(transport.drain(1), 1)
    await out.aclose()


async def test_a_clear_drops_the_deltas_still_queued() -> None:
    clock = Clock()
    transport, out, ws = make(clock)
    answered(transport)
    ws.open.clear()  # the client is slow: the writer is stuck on its first frame
    out.start()
    await transport.play(1, np.full(48000, 1000, np.int16))  # 2 s: ten deltas
    await settle()
    assert out.audio_queued_for(1) > 0
    transport.clear(1)
    assert out.audio_queued_for(1) == 0
    await transport.play(1, np.full(4800, 1000, np.int16))  # after the clear: sent again
    ws.open.set()
    await settle()
    deltas: list[Any] = [json.loads(m) for m in ws.sent if isinstance(m, str) and "output_audio.delta" in m]
    assert 1 <= len(deltas) <= 3  # what was being written, and the new audio
    await out.aclose()
