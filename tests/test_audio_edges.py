"""Audio edge cases through the real VAD (Silero) and ASR (faster-whisper tiny.en).

The LLM and TTS are fakes here: what is tested is what the input side makes of
strange audio. Through the file runner (float input, as fast as the session
takes it): NaN/inf samples, heavy clipping, a DC offset, full-scale white noise.
Directly on a session: ten minutes of silence (no turn, input buffers bounded).
Through a real server (``/ws``): a wrong declared sample rate, zero-length and
odd-length frames, invalid UTF-8 and 1 MB text frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator

import numpy as np
import pytest
from fakes import FakeClock, FakeLLM, FakeTTS, RecordingTransport
from servers import running_server
from speech import concat, espeak, normalize, silence, word_error_rate
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from wsclient import voice_client

from asr.base import ASREngine
from vad.base import VAD
from voice_pipeline import events as ev
from voice_pipeline.audio import finite_audio, resample, to_int16
from voice_pipeline.config import Config
from voice_pipeline.conversation.session import Session
from voice_pipeline.engines import Engines
from voice_pipeline.runner import RunResult, run_audio
from voice_pipeline.server.app import VoiceServer

QUESTION = "What is the capital of France?"
MAX_WER = 0.5
RATE = 16000


# ---------------------------------------------------------------- pure


def test_finite_audio_silences_nan_and_clips() -> None:
    x = np.array([0.5, np.nan, np.inf, -np.inf, 3.0, -2.0, -0.25], dtype=np.float32)
    y = finite_audio(x)
    assert y.dtype == np.float32 and np.all(np.isfinite(y))
    assert y.tolist() == [0.5, 0.0, 1.0, -1.0, 1.0, -1.0, -0.25]
    clean = np.array([0.1, -1.0, 1.0], dtype=np.float32)
    assert finite_audio(clean) is clean  # the usual case costs no copy
    assert finite_audio(np.zeros(0, dtype=np.float32)).size == 0


# ---------------------------------------------------------------- real VAD + ASR

pytestmark = pytest.mark.real_models


@pytest.fixture(scope="module")
def input_engines(silero16: VAD, whisper: ASREngine) -> Engines:
    return Engines(vad=silero16, asr=whisper, llm=FakeLLM(), tts=FakeTTS())


@pytest.fixture(scope="module")
def question() -> np.ndarray:
    return concat(silence(0.5), espeak(QUESTION), silence(1.5))


async def run(engines: Engines, config: Config, audio: np.ndarray) -> RunResult:
    async with asyncio.timeout(180):  # a turn that never ends would hang here
        return await run_audio(engines, config, audio.astype(np.float32), RATE, realtime=False)


def heard_question(result: RunResult) -> bool:
    return any(word_error_rate(QUESTION, r.user_text) <= MAX_WER for r in result.records)


async def test_nan_and_inf_samples_are_silence_not_speech(
    input_engines: Engines, config: Config, question: np.ndarray
) -> None:
    noisy = silence(3.0)
    noisy[1000:1400] = np.nan
    noisy[20000:20010] = np.inf
    noisy[30000:30005] = -np.inf
    noisy[40000] = 3e38
    result = await run(input_engines, config, concat(noisy, question))
    # one NaN would corrupt Silero's recurrent state: it then "hears" speech in silence
    assert len(result.records) == 1, [r.user_text for r in result.records]
    assert heard_question(result), result.records[0].user_text
    assert np.all(np.isfinite(result.output.astype(np.float64)))


async def test_heavily_clipped_speech_is_still_understood(
    input_engines: Engines, config: Config, question: np.ndarray
) -> None:
    clipped = np.clip(question * 8.0, -1.0, 1.0)
    result = await run(input_engines, config, clipped)
    assert heard_question(result), [r.user_text for r in result.records]


async def test_a_dc_offset_neither_hides_speech_nor_makes_a_turn(
    input_engines: Engines, config: Config, question: np.ndarray
) -> None:
    offset = 0.25
    quiet = await run(input_engines, config, silence(4.0) + offset)
    assert quiet.records == ()  # a constant is not speech
    result = await run(input_engines, config, np.clip(question + offset, -1.0, 1.0))
    assert heard_question(result), [r.user_text for r in result.records]


async def test_full_scale_white_noise_does_not_crash_and_any_turn_ends(
    input_engines: Engines, config: Config, question: np.ndarray
) -> None:
    noise = np.random.default_rng(7).uniform(-1.0, 1.0, 5 * RATE).astype(np.float32)
    result = await run(input_engines, config, concat(noise, silence(2.0), question))
    # run() returning means every turn that started also ended; the question still gets through
    assert all(r.marks_ns.get("turn_end") for r in result.records)
    assert heard_question(result), [r.user_text for r in result.records]


async def test_ten_minutes_of_silence_start_no_turn_and_keep_buffers_bounded(
    input_engines: Engines, config: Config
) -> None:
    clock = FakeClock()
    transport = RecordingTransport(clock)
    session = Session(input_engines, config, transport, clock=clock)
    chunk = RATE // 50
    rng = np.random.default_rng(3)
    most_chunks = 0
    try:
        for i in range(10 * 60 * 50):  # 10 min of 20 ms chunks, as fast as the session takes them
            clock.advance(20_000_000)
            quiet = (rng.standard_normal(chunk) * 1e-3).astype(np.float32)  # -60 dBFS room tone
            await session.push_audio(quiet, clock())
            if i % 500 == 0:
                most_chunks = max(most_chunks, len(session._input._chunks))
                await asyncio.sleep(0)
    finally:
        await session.aclose()
    assert not transport.of(ev.SpeechStarted)
    assert session.ledger.turns == 0 and session.unfinished_tasks() == 0
    assert most_chunks <= 4 * 50 + 2  # the input history keeps its 4 s, not 10 minutes


# ---------------------------------------------------------------- through the server

MAX_FRAME = 4096


@pytest.fixture(scope="module")
async def server(input_engines: Engines, config: Config) -> AsyncIterator[VoiceServer]:
    settings = {"max_frame_bytes": MAX_FRAME, "max_sessions": 4, "max_new_sessions_per_ip_per_min": 0}
    async with running_server(input_engines, config, **settings) as srv:
        yield srv


def url(srv: VoiceServer) -> str:
    return f"ws://127.0.0.1:{srv.port}/ws"


async def ask(srv: VoiceServer, declared: int, actual: int, before: list[bytes] = ()) -> dict[str, object]:
    """Declare ``declared`` Hz, send the question recorded at ``actual`` Hz; the final transcript."""
    async with voice_client(url(srv), rate_hz=declared) as client:
        await client.start(sample_rate=declared)
        for frame in before:
            await client.send(frame)
        audio = resample(concat(espeak(QUESTION), silence(0.3)), RATE, actual)
        client.start_microphone()
        client.say(audio)  # sent as if it were ``declared`` Hz
        try:
            final = await client.wait_for(lambda m: m["type"] == "transcript.final", 90)
        finally:
            errors = client.of("error")
        return {"final": final, "errors": errors, "closed": client.closed}


async def stream_wrong_rate(srv: VoiceServer, declared: int, actual: int) -> list[dict[str, object]]:
    """Declare ``declared`` Hz but send the question recorded at ``actual`` Hz, then ``stop``."""
    async with voice_client(url(srv), rate_hz=declared) as client:
        await client.start(sample_rate=declared)
        client.start_microphone()
        audio = resample(concat(espeak(QUESTION), silence(1.0)), RATE, actual)[: declared * 6]  # <= 6 s
        client.say(audio)
        await asyncio.sleep(len(audio) / declared + 2.0)  # the microphone sends it in real time
        await client.send({"type": "stop"})
        assert await client.wait_closed() == (1000, "session ended by the client")  # still responsive
        return client.messages


@pytest.mark.parametrize(("declared", "actual"), [(8000, 48000), (48000, 8000)])
async def test_a_wrong_declared_rate_gives_wrong_words_not_a_crash(
    server: VoiceServer, declared: int, actual: int
) -> None:
    # 8 -> 48: heard six times slower and lower; 48 -> 8: six times faster. Neither is an error:
    # the server cannot know, it hears garbled audio, perhaps a turn, and goes on
    messages = await stream_wrong_rate(server, declared, actual)
    assert not [m for m in messages if m["type"] in ("error", "turn.failed")]
    started = {m["turn_id"] for m in messages if m["type"] == "speech.started"}
    finals = [m for m in messages if m["type"] == "transcript.final"]
    print(
        f"declared {declared}, sent {actual}: turns {len(started)}, transcripts {[m['text'] for m in finals]}"
    )
    # and a client that declares its rate right is understood, on the same server
    good = await ask(server, 48000, 48000)
    assert word_error_rate(QUESTION, str(good["final"]["text"])) <= MAX_WER  # type: ignore[index]


async def test_zero_length_and_odd_length_frames(server: VoiceServer) -> None:
    result = await ask(server, 16000, 16000, before=[b"", b"\x01", b"\x00" * 641, b""])
    codes = [e["code"] for e in result["errors"]]  # type: ignore[union-attr]
    assert codes == ["bad_audio", "bad_audio"]  # odd lengths; an empty frame is no audio, not an error
    text = str(result["final"]["text"])  # type: ignore[index]
    assert "capital" in normalize(text) or word_error_rate(QUESTION, text) <= MAX_WER


@pytest.mark.parametrize(
    ("frame", "code"),
    [(b"\xff\xfe{not utf-8", 1007), ("{" + " " * 1_000_000 + "}", 1009)],
    ids=["invalid-utf8", "1MB-text"],
)
async def test_bad_text_frames_close_with_a_reason_and_the_server_goes_on(
    server: VoiceServer, frame: str | bytes, code: int
) -> None:
    async with connect(url(server)) as ws:
        await ws.send(json.dumps({"type": "start", "version": 1, "sample_rate": 16000}))
        assert json.loads(await ws.recv())["type"] == "ready"
        await ws.send(frame, text=True)
        with pytest.raises(ConnectionClosed):
            while True:
                await ws.recv()
        assert ws.close_code == code and ws.close_reason
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(10):
            while server.connections:  # noqa: ASYNC110 -- server state
                await asyncio.sleep(0.05)
    assert not server.connections  # that session was closed, its tasks ended
    good = await ask(server, 16000, 16000)
    assert word_error_rate(QUESTION, str(good["final"]["text"])) <= MAX_WER  # type: ignore[index]


async def test_empty_frames_do_not_keep_an_idle_session_alive(input_engines: Engines, config: Config) -> None:
    settings = {"port": 0, "idle_timeout_s": 0.6, "max_new_sessions_per_ip_per_min": 0}
    cfg = dataclasses.replace(config, server=dataclasses.replace(config.server, **settings))
    srv = VoiceServer(input_engines, cfg)
    await srv.start()
    try:
        async with voice_client(url(srv)) as client:
            await client.start()

            async def empty_frames() -> None:
                with contextlib.suppress(ConnectionClosed):
                    while True:
                        await client.send(b"")
                        await asyncio.sleep(0.1)

            sender = asyncio.create_task(empty_frames())
            try:
                code, reason = await client.wait_closed(10)
            finally:
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
        assert code == 1000 and reason and reason.startswith("idle")
        assert not client.of("error")
    finally:
        await srv.aclose()


def pcm(audio: np.ndarray) -> bytes:
    return to_int16(audio).astype("<i2").tobytes()
