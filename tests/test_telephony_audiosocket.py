"""Asterisk AudioSocket end to end with the real models: a simulated Asterisk over TCP.

The client sends the call's UUID, then 8 kHz slin (16-bit linear) audio in 20 ms frames (320
bytes) at real-time pace, always (espeak-ng speech, else silence), and records
the frames the server sends back with their arrival times.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest
import soxr
from polling import until
from speech import espeak, word_error_rate

from voice_pipeline.audio import resample, to_float32, to_int16
from voice_pipeline.config import Config
from voice_pipeline.conversation.session import Session
from voice_pipeline.engines import Engines
from voice_pipeline.telephony.audiosocket import Kind, frame
from voice_pipeline.telephony.audiosocket_server import AudioSocketServer

pytestmark = pytest.mark.real_models

QUESTION = "What is the capital of France?"
STORY = "Tell me a long story about a brave knight and a dragon."
NARROWBAND_WER = 0.4


@pytest.fixture(scope="module")
async def server(engines: Engines, config: Config) -> AsyncIterator[AudioSocketServer]:
    cfg = dataclasses.replace(config, server=dataclasses.replace(config.server, max_sessions=4))
    srv = AudioSocketServer(engines, cfg, "127.0.0.1", 0)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.aclose()


class Asterisk:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.frames: list[tuple[float, int, bytes]] = []  # (arrival, kind, payload)
        self.closed = False
        self._speech: deque[np.ndarray] = deque()
        self._tasks: list[asyncio.Task[None]] = []

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def begin(self) -> None:
        self.send(frame(Kind.UUID, uuid.uuid4().bytes))
        self._tasks += [asyncio.create_task(self._read()), asyncio.create_task(self._microphone())]

    def say(self, speech16k: np.ndarray) -> None:
        self._speech.append(soxr.resample(speech16k, 16000, 8000, quality="HQ").astype(np.float32))

    async def _microphone(self) -> None:
        loop = asyncio.get_running_loop()
        pending = np.zeros(0, dtype=np.float32)
        t0, n = loop.time(), 0
        with contextlib.suppress(ConnectionError):
            while True:
                while len(pending) < 160 and self._speech:
                    pending = np.concatenate([pending, self._speech.popleft()])
                chunk, pending = pending[:160], pending[160:]
                chunk = np.concatenate([chunk, np.zeros(160 - len(chunk), dtype=np.float32)])
                n += 1
                await asyncio.sleep(max(0.0, t0 + n * 0.02 - loop.time()))
                self.send(frame(Kind.SLIN, to_int16(chunk).astype("<i2").tobytes()))
                await self.writer.drain()

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                header = await self.reader.readexactly(3)
                payload = await self.reader.readexactly(int.from_bytes(header[1:], "big"))
                self.frames.append((loop.time(), header[0], payload))
        self.closed = True

    def audio(self) -> list[tuple[float, int, bytes]]:
        return [f for f in self.frames if f[1] == Kind.SLIN]

    async def hang_up(self) -> None:
        for task in self._tasks[1:]:
            task.cancel()
        self.send(frame(Kind.HANGUP))
        await self.writer.drain()

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.writer.close()


@contextlib.asynccontextmanager
async def asterisk(srv: AudioSocketServer) -> AsyncIterator[Asterisk]:
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    client = Asterisk(reader, writer)
    try:
        yield client
    finally:
        await client.aclose()


def session_of(srv: AudioSocketServer, before: int) -> Callable[[], Session]:
    return lambda: srv.sessions[before]


async def test_a_call_gets_a_paced_reply_and_hangs_up(server: AudioSocketServer, whisper: object) -> None:
    n = len(server.sessions)
    async with asterisk(server) as call:
        call.begin()
        await until(lambda: len(server.sessions) > n, 10)
        session = server.sessions[n]
        call.say(espeak(QUESTION))
        await until(lambda: len(session.ledger.records) >= 1, 120)
        record = session.ledger.records[0]
        assert word_error_rate(QUESTION, record.user_text) <= NARROWBAND_WER, record.user_text
        assert record.assistant_text and not record.interrupted
        audio = call.audio()
        assert audio and all(len(p) == 320 for _, _, p in audio)
        gaps_ms = np.diff([t for t, _, _ in audio]) * 1000
        assert np.median(gaps_ms) == pytest.approx(20, abs=8), np.median(gaps_ms)
        assert audio[-1][0] - audio[0][0] >= 0.7 * len(audio) * 0.02 - 0.3
        pcm = np.frombuffer(b"".join(p for _, _, p in audio), dtype="<i2").astype(np.int16)
        heard = whisper.transcribe(resample(to_float32(pcm), 8000, 16000)).text  # type: ignore[attr-defined]
        assert word_error_rate(record.assistant_text, heard) <= 0.5, (record.assistant_text, heard)
        print(f"audiosocket reply: {len(audio)} frames, gaps median {np.median(gaps_ms):.1f} ms")
        await call.hang_up()
        await until(lambda: call.closed, 10)
    await until(lambda: session.unfinished_tasks() == 0, 10)


async def test_barge_in_stops_the_reply(server: AudioSocketServer) -> None:
    n = len(server.sessions)
    async with asterisk(server) as call:
        call.begin()
        await until(lambda: len(server.sessions) > n, 10)
        session = server.sessions[n]
        call.say(espeak(STORY))
        await until(lambda: len(call.audio()) >= 75, 120)
        call.say(espeak(QUESTION))
        await until(lambda: len(session.ledger.records) >= 1, 30)
        story = session.ledger.records[0]
        assert story.interrupted and 0 < story.work.audio_heard_s < story.work.audio_synthesized_s
        print(
            f"audiosocket barge-in: heard {story.work.audio_heard_s:.2f} s "
            f"of {story.work.audio_synthesized_s:.2f} s"
        )
        await call.hang_up()


@pytest.mark.parametrize(
    "garbage",
    [
        frame(Kind.UUID, uuid.uuid4().bytes)[:1] + (400).to_bytes(2, "big") + b"x" * 16,  # lying UUID length
        frame(Kind.SLIN, b"\x00" * 320),  # audio before the UUID
        frame(Kind.UUID, uuid.uuid4().bytes) + b"\x10" + (60000).to_bytes(2, "big"),  # oversized audio
        frame(Kind.UUID, uuid.uuid4().bytes) + b"\x10\x01\x40" + b"\x00" * 20,  # then EOF mid-frame
        frame(Kind.UUID, uuid.uuid4().bytes) + frame(0x42, b"?"),  # unknown kind
    ],
)
async def test_a_bad_frame_ends_only_that_call(server: AudioSocketServer, garbage: bytes) -> None:
    async with asterisk(server) as good, asterisk(server) as bad:
        good.begin()
        bad.send(garbage)
        await bad.writer.drain()
        if garbage.endswith(b"\x00" * 20):
            bad.writer.write_eof()
        data = await asyncio.wait_for(bad.reader.read(), 10)  # the server hangs up and closes
        assert data in (b"", frame(Kind.HANGUP))
        await asyncio.sleep(0.1)
        assert not good.closed
        await good.hang_up()
        await until(lambda: good.closed, 10)
