"""Load: a storm of connections beyond the session limit, and 500 connect/disconnect cycles.

* Storm (real models): two sessions are admitted and each asks a spoken
  question; while they speak, 50 more connections arrive at once. Every one of
  them is refused promptly with 1013 and a reason, and both admitted sessions
  complete their real turn. Their voice-to-voice latency is printed beside a
  quiet baseline (a figure, not an assertion: the machine is shared).
* Churn (fake engines: this is about connection handling): 500 sessions open,
  start, send audio and end (``stop``, or the client just drops) one after
  another. After a warm-up of 50, asyncio tasks and open file descriptors
  return to where they were and RSS grows by less than 30 MB.

The per-address rate limit is off here (``max_new_sessions_per_ip_per_min: 0``):
everything comes from 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import os
import time
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import Fakes, tone
from servers import running_server, ws_url
from speech import concat, espeak, silence, word_error_rate
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from wsclient import voice_client

from voice_pipeline.audio import to_int16
from voice_pipeline.config import Config, load_config
from voice_pipeline.engines import Engines
from voice_pipeline.server.app import VoiceServer
from voice_pipeline.telephony.audiosocket import Kind, frame
from voice_pipeline.telephony.audiosocket_server import AudioSocketServer

QUESTION = "What is the capital of France?"
STORM = 50


def running(engines: Engines, config: Config, **server: Any) -> AbstractAsyncContextManager[VoiceServer]:
    return running_server(engines, config, **{"max_new_sessions_per_ip_per_min": 0, **server})


# ---------------------------------------------------------------- the storm


async def one_turn(
    srv: VoiceServer, started: asyncio.Event | None = None, leave: asyncio.Event | None = None
) -> dict[str, Any]:
    """A session asks the question; returns its turn record. It stays connected until ``leave``."""
    async with voice_client(ws_url(srv)) as client:
        await client.start()
        if started is not None:
            started.set()
        client.start_microphone()
        client.say(concat(silence(0.3), espeak(QUESTION)))
        latency = await client.wait_for(lambda m: m["type"] == "turn.latency", 180)
        if leave is not None:
            await leave.wait()
        await client.send({"type": "stop"})
        await client.wait_closed()
        return dict(latency["record"])


async def refused(srv: VoiceServer) -> tuple[int | None, str | None, float]:
    t0 = time.monotonic()
    async with connect(ws_url(srv)) as ws:
        with contextlib.suppress(ConnectionClosed):
            await ws.recv()
        return ws.close_code, ws.close_reason, time.monotonic() - t0


async def two_turns(
    srv: VoiceServer, *, storm: bool
) -> tuple[list[dict[str, Any]], list[tuple[int | None, str | None, float]]]:
    """Two admitted sessions each take a real turn; with ``storm``, waves of STORM connection
    attempts at once arrive the whole time (the two stay connected until the storm is over).
    Returns the two records and every refusal."""
    admitted = [asyncio.Event(), asyncio.Event()]
    leave = asyncio.Event()
    tasks = [asyncio.create_task(one_turn(srv, ev, leave)) for ev in admitted]
    refusals: list[tuple[int | None, str | None, float]] = []
    try:
        await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in admitted)), 30)
        async with asyncio.timeout(240):
            while (
                storm
                and sum(c.session is not None and c.session.ledger.turns > 0 for c in srv.connections) < 2
            ):
                refusals += await asyncio.gather(*(refused(srv) for _ in range(STORM)))
            leave.set()
            records = await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return records, refusals


@pytest.mark.real_models
async def test_a_storm_beyond_the_limit_is_refused_and_admitted_sessions_keep_working(
    engines: Engines, config: Config
) -> None:
    async with running(engines, config, max_sessions=2) as srv:
        baseline = await one_turn(srv)
        quiet, _ = await two_turns(srv, storm=False)
        stormy, storm = await two_turns(srv, storm=True)
        assert srv.metrics.sessions_refused.get("limit") == len(storm)
    assert len(storm) >= STORM
    assert all(code == 1013 and reason and "limit" in reason for code, reason, _ in storm), storm
    for record in (baseline, *quiet, *stormy):
        assert word_error_rate(QUESTION, str(record["user_text"])) <= 0.5, record["user_text"]
        assert record["assistant_text"]
    waits = sorted(t for _, _, t in storm)

    def v2v(records: list[dict[str, Any]]) -> list[object]:
        return [r["stages_ms"].get("voice_to_voice") for r in records]

    print(
        f"\n{len(storm)} refused ({len(storm) // STORM} waves of {STORM} at once), each in median "
        f"{1000 * waits[len(waits) // 2]:.0f} ms, max {1000 * waits[-1]:.0f} ms. Voice-to-voice (ms): "
        f"one session alone {v2v([baseline])}, two at once {v2v(quiet)}, two during the storm {v2v(stormy)}"
    )


# ---------------------------------------------------------------- churn


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


SPEECH = to_int16(tone(0.2)).astype("<i2").tobytes()


async def cycle(srv: VoiceServer, i: int) -> None:
    async with connect(ws_url(srv)) as ws:
        await ws.send(json.dumps({"type": "start", "version": 1, "sample_rate": 16000}))
        assert json.loads(await ws.recv())["type"] == "ready"
        for k in range(0, len(SPEECH), 640):
            await ws.send(SPEECH[k : k + 640])
        match i % 3:
            case 0:
                await ws.send(json.dumps({"type": "stop"}))
                with contextlib.suppress(ConnectionClosed):
                    while True:
                        await ws.recv()
                assert ws.close_code == 1000
            case 1:
                await ws.send(json.dumps({"type": "bogus"}))  # an error, then the client leaves
            case _:
                ws.transport.abort()  # the client vanishes without a close frame


async def settled(srv: VoiceServer) -> None:
    async with asyncio.timeout(30):
        while srv.connections:  # noqa: ASYNC110 -- server state
            await asyncio.sleep(0.01)
    for _ in range(20):
        await asyncio.sleep(0.01)
    gc.collect()


async def test_500_connect_disconnect_cycles_leak_no_tasks_fds_or_memory() -> None:
    base = load_config(None)
    engines = Fakes().engines()
    async with running(engines, base, max_sessions=4, idle_timeout_s=10.0) as srv:
        for i in range(50):  # warm-up: imports, caches, the executor's threads
            await cycle(srv, i)
        await settled(srv)
        tasks0, fds0, rss0 = len(asyncio.all_tasks()), open_fds(), rss_mb()
        t0 = time.monotonic()
        for i in range(50, 550):
            await cycle(srv, i)
        await settled(srv)
        tasks1, fds1, rss1 = len(asyncio.all_tasks()), open_fds(), rss_mb()
        print(
            f"\n500 cycles in {time.monotonic() - t0:.1f} s: tasks {tasks0} -> {tasks1}, "
            f"fds {fds0} -> {fds1}, RSS {rss0:.1f} -> {rss1:.1f} MB"
        )
        assert srv.metrics.sessions_refused == {}
    assert tasks1 <= tasks0
    assert fds1 <= fds0 + 2  # a listening socket or log file may come and go; not one per session
    assert rss1 - rss0 < 30.0
    assert np.isfinite(rss1)


async def call(port: int, i: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(frame(Kind.UUID, i.to_bytes(16, "big")))
    for k in range(0, 3200, 320):
        writer.write(frame(Kind.SLIN, SPEECH[k : k + 320]))
    if i % 2:
        writer.write(frame(Kind.HANGUP))
    else:
        writer.write_eof()  # Asterisk's side just closes
    await writer.drain()
    await reader.read()  # until the server hangs up and closes
    writer.close()
    await writer.wait_closed()


async def test_300_audiosocket_calls_leak_no_tasks_fds_sessions_or_memory() -> None:
    base = load_config(None)
    cfg = dataclasses.replace(base, server=dataclasses.replace(base.server, max_sessions=4))
    srv = AudioSocketServer(Fakes().engines(), cfg, "127.0.0.1", 0)
    await srv.start()
    try:
        for i in range(40):  # warm-up, and the 16 sessions kept for inspection
            await call(srv.port, i)
        await asyncio.sleep(0.2)
        gc.collect()
        tasks0, fds0, rss0 = len(asyncio.all_tasks()), open_fds(), rss_mb()
        for i in range(40, 340):
            await call(srv.port, i)
        async with asyncio.timeout(30):
            while srv.calls:  # noqa: ASYNC110 -- server state
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        gc.collect()
        tasks1, fds1, rss1 = len(asyncio.all_tasks()), open_fds(), rss_mb()
        print(
            f"\n300 calls: tasks {tasks0} -> {tasks1}, fds {fds0} -> {fds1}, RSS {rss0:.1f} -> {rss1:.1f} MB"
        )
        assert len(srv.sessions) <= 64  # the latest, for inspection; not one per call ever made
    finally:
        await srv.aclose()
    assert tasks1 <= tasks0 and fds1 <= fds0 + 2 and rss1 - rss0 < 30.0
