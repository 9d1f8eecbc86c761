"""AudioSocket calls are sessions of the server: in /metrics and /healthz, and within max_sessions.

``serve`` gives its AudioSocket server the WebSocket server's
:class:`~voice_pipeline.edge.SessionLimit` (limit and metrics); here both run
in-process on the fake engines, as ``serve`` wires them. (The same through the
real ``serve`` command and models: tests/test_cli_serve.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator

import httpx
import numpy as np
import pytest
from fakes import Fakes, silence, tone
from polling import until
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from voice_pipeline.audio import resample, to_int16
from voice_pipeline.config import load_config
from voice_pipeline.server.app import VoiceServer
from voice_pipeline.telephony.audiosocket import Kind, frame
from voice_pipeline.telephony.audiosocket_server import AudioSocketServer

START = {"type": "start", "version": 1, "sample_rate": 16000, "format": "pcm16"}


@contextlib.asynccontextmanager
async def servers(max_sessions: int = 1) -> AsyncIterator[tuple[VoiceServer, AudioSocketServer]]:
    base = load_config(None)
    settings = {"port": 0, "max_sessions": max_sessions, "max_new_sessions_per_ip_per_min": 0}
    cfg = dataclasses.replace(base, server=dataclasses.replace(base.server, **settings))
    engines = Fakes().engines()
    voice = VoiceServer(engines, cfg)
    await voice.start()
    phones = AudioSocketServer(engines, cfg, "127.0.0.1", 0, limit=voice.limit)
    await phones.start()
    try:
        yield voice, phones
    finally:
        await phones.aclose()
        await voice.aclose()


async def metrics(voice: VoiceServer) -> dict[str, float]:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{voice.port}/metrics", timeout=10)).text
    out = {}
    for line in text.splitlines():
        if line.startswith("voice_pipeline_"):
            name, _, value = line.rpartition(" ")
            out[name.removeprefix("voice_pipeline_")] = float(value)
    return out


async def healthz(voice: VoiceServer) -> dict[str, object]:
    async with httpx.AsyncClient() as client:
        doc: dict[str, object] = (
            await client.get(f"http://127.0.0.1:{voice.port}/healthz", timeout=10)
        ).json()
        return doc


def slin(audio16k: np.ndarray) -> list[bytes]:
    """16 kHz float audio as the 20 ms 8 kHz slin frames Asterisk sends."""
    data = to_int16(resample(audio16k, 16000, 8000)).astype("<i2").tobytes()
    return [frame(Kind.SLIN, data[i : i + 320].ljust(320, b"\0")) for i in range(0, len(data), 320)]


async def ws_close_code(voice: VoiceServer) -> int | None:
    """Open /ws and say start: the close code if the server closes it, None if it is served."""
    async with connect(f"ws://127.0.0.1:{voice.port}/ws") as ws:
        try:
            await ws.send(json.dumps(START))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "ready"
        except ConnectionClosed:
            return ws.close_code
        return None


async def test_an_audiosocket_call_is_in_metrics_and_takes_a_session_slot() -> None:
    async with servers(max_sessions=1) as (voice, phones):
        reader, writer = await asyncio.open_connection("127.0.0.1", phones.port)
        writer.write(frame(Kind.UUID, uuid.uuid4().bytes))
        await writer.drain()
        await until(lambda: len(phones.sessions) == 1)
        m = await metrics(voice)
        assert m["sessions_active"] == 1 and m["sessions_total"] == 1
        assert m['endpoint_sessions_total{endpoint="audiosocket"}'] == 1  # counted per edge like /ws
        assert (await healthz(voice))["sessions_active"] == 1
        assert await ws_close_code(voice) == 1013  # the call holds the only slot
        assert (await metrics(voice))['sessions_refused_total{reason="limit"}'] == 1
        # a spoken turn on the call is counted like one on /ws
        for data in slin(np.concatenate([tone(0.6), silence(1.5)])):
            writer.write(data)
            await writer.drain()
            await asyncio.sleep(0.02)
        async with asyncio.timeout(20):
            while (await metrics(voice))["turns_total"] < 1:  # noqa: ASYNC110 -- polled over HTTP
                await asyncio.sleep(0.1)
        writer.write(frame(Kind.HANGUP))
        await writer.drain()
        await asyncio.wait_for(reader.read(), 10)  # the server hangs up and closes
        writer.close()
        await until(lambda: voice.limit.active == 0)
        m = await metrics(voice)
        assert m["sessions_active"] == 0 and m["sessions_total"] == 1
        assert await ws_close_code(voice) is None  # the slot is free again


async def test_an_audiosocket_call_is_refused_while_the_slots_are_taken() -> None:
    async with servers(max_sessions=1) as (voice, phones):
        async with connect(f"ws://127.0.0.1:{voice.port}/ws") as ws:
            await ws.send(json.dumps(START))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "ready"
            # refused as it connects, before anything is read (sending nothing, the client
            # reads the hangup frame rather than a reset for the bytes left unread)
            reader, writer = await asyncio.open_connection("127.0.0.1", phones.port)
            assert await asyncio.wait_for(reader.read(), 10) == frame(Kind.HANGUP)  # then EOF
            writer.close()
            assert len(phones.sessions) == 0
            m = await metrics(voice)
            assert m['sessions_refused_total{reason="limit"}'] == 1
            assert m["sessions_active"] == 1 and m["sessions_total"] == 1


@pytest.mark.parametrize("max_sessions", [2])
async def test_calls_and_ws_sessions_share_one_limit(max_sessions: int) -> None:
    async with servers(max_sessions=max_sessions) as (voice, phones):
        calls = []
        for _ in range(max_sessions):
            reader, writer = await asyncio.open_connection("127.0.0.1", phones.port)
            writer.write(frame(Kind.UUID, uuid.uuid4().bytes))
            await writer.drain()
            calls.append((reader, writer))
        await until(lambda: len(phones.sessions) == max_sessions)
        assert await ws_close_code(voice) == 1013
        reader, writer = calls.pop()
        writer.write(frame(Kind.HANGUP))
        await writer.drain()
        await asyncio.wait_for(reader.read(), 10)
        writer.close()
        await until(lambda: voice.limit.active == max_sessions - 1)
        assert await ws_close_code(voice) is None
        for _, w in calls:
            w.close()
