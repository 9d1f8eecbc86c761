"""``voice-pipeline talk`` against a real server started in-process (real models).

The client runs as a subprocess (``python -m voice_pipeline.cli talk ...``)
pointed at the in-process server's port, as a user would run it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from speech import espeak
from test_server_e2e import running_server, ws_url
from websockets.asyncio.client import connect

from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.server.app import VoiceServer

QUESTION = "What is the capital of France?"
EXE = [sys.executable, "-m", "voice_pipeline.cli", "talk"]


async def run_talk(*args: str, timeout_s: float = 180.0) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *EXE, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture(scope="module")
async def talk_server(engines: Engines, config: Config) -> AsyncIterator[VoiceServer]:
    async with running_server(engines, config, max_sessions=1) as srv:
        yield srv


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("talk") / "question.wav"
    sf.write(path, espeak(QUESTION, 22050), 22050, subtype="PCM_16")
    return path


@pytest.mark.real_models
async def test_headless_turn_gives_transcript_reply_audio_and_latency(
    talk_server: VoiceServer, question_wav: Path, tmp_path: Path
) -> None:
    reply = tmp_path / "reply.wav"
    code, out, err = await run_talk(
        "--url", ws_url(talk_server), "--input", str(question_wav), "--output", str(reply), "--json"
    )
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "ready" and kinds[-1] == "turn.latency"
    (final,) = [e for e in events if e["type"] == "transcript.final"]
    assert final["text"].strip()
    record = events[-1]["record"]
    assert record["user_text"].strip() and record["assistant_text"].strip()
    # push-to-talk ends the turn at once: no end-of-speech silence is waited for
    assert record["stages_ms"]["endpointing"] < 100, record["stages_ms"]
    audio, rate = sf.read(reply, dtype="int16")
    assert rate == 22050 and len(audio) > 0 and np.abs(audio).max() > 0


async def test_server_down_exits_non_zero_with_the_url() -> None:
    url = "ws://127.0.0.1:9/ws"  # discard port: nothing listens
    code, _, err = await run_talk("--url", url, "--input", str(Path(__file__)), timeout_s=60)
    assert code != 0
    # the input is checked first: a bad file is its own error
    assert "not a readable audio file" in err
    wav = Path(__file__).parent / "_silence_for_talk.wav"
    try:
        sf.write(wav, np.zeros(1600, dtype=np.float32), 16000)
        code, _, err = await run_talk("--url", url, "--input", str(wav), timeout_s=60)
    finally:
        wav.unlink(missing_ok=True)
    assert code == 1
    assert f"server not reachable at {url}" in err and "Traceback" not in err


@pytest.mark.real_models
async def test_server_refusal_shows_the_close_reason(talk_server: VoiceServer, question_wav: Path) -> None:
    async with connect(ws_url(talk_server)) as holder:  # takes the only session
        start = {"type": "start", "version": 1, "sample_rate": 16000, "format": "pcm16"}
        await holder.send(json.dumps(start))
        assert json.loads(await holder.recv())["type"] == "ready"
        code, _, err = await run_talk("--url", ws_url(talk_server), "--input", str(question_wav))
    assert code == 1
    assert "refused" in err and "1013" in err and "session limit reached (1)" in err, err
    assert "Traceback" not in err
