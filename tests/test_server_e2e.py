"""The WebSocket server end to end with the real models, in-process on a free port.

A Python client speaks espeak-ng questions as PCM16 in 20 ms frames at real-time
pace (silence in between, like a live microphone) and records what comes back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import numpy as np
import pytest
import servers
from servers import ws_url
from speech import espeak, normalize, word_error_rate
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from wsclient import VoiceClient, voice_client

from voice_pipeline.audio import resample, to_float32
from voice_pipeline.config import Config
from voice_pipeline.conversation.wiring import listening
from voice_pipeline.engines import Engines
from voice_pipeline.ledger.ledger import CRITICAL_PATH
from voice_pipeline.server.app import VoiceServer

pytestmark = pytest.mark.real_models

QUESTION = "What is the capital of France?"
STORY = "Tell me a long story about a brave knight and a dragon."
OUT_RATE = 24000
MAX_FRAME_BYTES = 4096
MIC_RATE = 48000  # the barge-in test's microphone: 20 ms = 1920 bytes


def running_server(
    engines: Engines, config: Config, **server: Any
) -> AbstractAsyncContextManager[VoiceServer]:
    return servers.running_server(engines, config, **{"max_frame_bytes": MAX_FRAME_BYTES, **server})


@pytest.fixture(scope="module")
async def server(engines: Engines, config: Config) -> AsyncIterator[VoiceServer]:
    async with running_server(engines, config) as srv:
        yield srv


# ------------------------------------------------------------ one conversation


#: (frame sent, error code expected), in order; the session must survive each
BAD_BEFORE_START: list[tuple[str | bytes | dict[str, Any], str]] = [
    (b"\x00\x00" * 160, "not_started"),
    ({"type": "interrupt"}, "not_started"),
    ({"type": "start", "version": 1, "sample_rate": 4000, "format": "pcm16"}, "bad_field"),
    ({"type": "start", "version": 1, "sample_rate": 16000, "output_sample_rate": 96000}, "bad_field"),
    ({"type": "start", "version": 2, "sample_rate": 16000, "format": "pcm16"}, "unsupported_version"),
]
BAD_AFTER_START: list[tuple[str | bytes | dict[str, Any], str]] = [
    ({"type": "start", "version": 1, "sample_rate": 16000, "format": "pcm16"}, "already_started"),
    ("UklGRiQAAABXQVZFZm10", "bad_json"),  # audio sent as text
    ("{not json", "bad_json"),
    ("[1, 2, 3]", "bad_json"),
    ({"type": "dance"}, "unknown_type"),
    ({"no_type": True}, "unknown_type"),
    ({"type": "playback", "played": -5}, "bad_field"),
    ({"type": "playback", "played": "lots"}, "bad_field"),
    (b"\x01\x02\x03", "bad_audio"),
    (b"\x00" * (MAX_FRAME_BYTES + 2), "frame_too_large"),
]


@dataclasses.dataclass
class Conversation:
    ready: dict[str, Any]
    client: VoiceClient
    errors: list[dict[str, Any]]
    latency: dict[str, Any]


@pytest.fixture(scope="module")
async def conversation(server: VoiceServer) -> Conversation:
    async with voice_client(ws_url(server)) as client:
        for frame, _ in BAD_BEFORE_START:
            await client.send(frame)
        n = len(BAD_BEFORE_START)
        await client.wait_until(lambda: len(client.of("error")) >= n, 30)
        ready = await client.start(output_sample_rate=OUT_RATE)
        for frame, _ in BAD_AFTER_START:
            await client.send(frame)
        n += len(BAD_AFTER_START)
        await client.wait_until(lambda: len(client.of("error")) >= n, 30)
        client.start_microphone()
        client.say(espeak(QUESTION))
        latency = await client.wait_for(lambda m: m["type"] == "turn.latency", 120)
    return Conversation(ready, client, client.of("error"), latency)


def test_every_bad_message_gets_its_error_and_the_session_goes_on(conversation: Conversation) -> None:
    expected = [code for _, code in BAD_BEFORE_START + BAD_AFTER_START]
    assert [e["code"] for e in conversation.errors] == expected
    assert all(e["message"] for e in conversation.errors)
    assert conversation.latency["record"]["assistant_text"]  # still answered afterwards


def test_ready_describes_the_session(conversation: Conversation) -> None:
    ready = conversation.ready
    assert ready["version"] == 1 and ready["session_id"]
    assert ready["input_sample_rate"] == 16000
    assert ready["output_sample_rate"] == OUT_RATE
    assert ready["max_frame_bytes"] == MAX_FRAME_BYTES
    assert {s.name for s in CRITICAL_PATH} <= set(ready["budgets"])


def test_the_question_is_transcribed_live(
    conversation: Conversation, engines: Engines, config: Config
) -> None:
    client = conversation.client
    turn = conversation.latency["turn_id"]
    assert [m["turn_id"] for m in client.of("speech.started")][:1] == [turn]
    partials = [m for m in client.of("transcript.partial") if m["turn_id"] == turn]
    if listening(engines, config.asr).partial_interval_ms > 0:
        assert partials
    else:  # Whisper is slow here (asr.partials_max_decode_ms): a partial would hold the reply back
        assert not partials, partials
    (final,) = [m for m in client.of("transcript.final") if m["turn_id"] == turn]
    assert word_error_rate(QUESTION, final["text"]) <= 0.15, final["text"]


def test_the_reply_text_streams_and_mentions_paris(conversation: Conversation) -> None:
    deltas = [m["delta"] for m in conversation.client.of("assistant.text")]
    assert len(deltas) > 1
    text = "".join(deltas)
    assert text.strip() == conversation.latency["record"]["assistant_text"]
    assert "paris" in normalize(text)


def test_reply_audio_comes_at_the_requested_rate(conversation: Conversation, whisper: Any) -> None:
    frames = conversation.client.audio
    assert frames
    for f in frames:
        assert f.header["turn_id"] == conversation.latency["turn_id"]
        assert f.header["samples"] == len(f.pcm) > 0
    pcm = np.concatenate([f.pcm for f in frames])
    record = conversation.latency["record"]
    assert abs(len(pcm) / OUT_RATE - record["work"]["audio_synthesized_s"]) < 0.01
    heard = whisper.transcribe(resample(to_float32(pcm), OUT_RATE, 16000)).text
    assert "paris" in normalize(heard), heard


def test_turn_latency_record_has_every_critical_stage(conversation: Conversation) -> None:
    record = conversation.latency["record"]
    for stage in CRITICAL_PATH:
        assert record["stages_ms"][stage.name] >= 0, stage.name
    assert "voice_to_voice" in record["stages_ms"]
    assert record["user_text"] and not record["interrupted"]
    assert set(record["marks"]) >= {"speech_end", "first_audio_sent", "turn_end"}


# ------------------------------------------------------------ plain HTTP


async def http_get(port: int, target: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {target} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\n\r\n".encode())
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


async def test_healthz_answers_json(server: VoiceServer, config: Config) -> None:
    status, headers, body = await http_get(server.port, "/healthz")
    assert status == 200 and headers["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc["status"] == "ok" and doc["protocol_version"] == 1
    assert doc["max_sessions"] == config.server.max_sessions and doc["sessions_active"] in (0, 1)


async def test_metrics_count_the_conversation(server: VoiceServer, conversation: Conversation) -> None:
    status, headers, body = await http_get(server.port, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert int(values["voice_pipeline_turns_total"]) >= 1
    assert int(values["voice_pipeline_sessions_total"]) >= 1
    assert int(values['voice_pipeline_stage_latency_seconds_count{stage="voice_to_voice"}']) >= 1
    assert "# TYPE voice_pipeline_stage_latency_seconds histogram" in text


async def test_demo_page_is_served_with_content_types(server: VoiceServer) -> None:
    status, headers, body = await http_get(server.port, "/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert b"<html" in body.lower()
    status, headers, _ = await http_get(server.port, "/app.js")
    assert status == 200 and headers["content-type"] == "text/javascript; charset=utf-8"


@pytest.mark.parametrize(
    "target",
    [
        "/../__init__.py",  # clients/__init__.py, one level above the static folder
        "/%2e%2e/__init__.py",
        "/%2E%2E%2F__init__.py",
        "/..%2f__init__.py",
        "/static/../../__init__.py",
        "/../../pyproject.toml",
        "/%2e%2e/%2e%2e/pyproject.toml",
        "/..\\__init__.py",
        "/%00index.html",
        "/no-such-file.js",
    ],
)
async def test_nothing_outside_the_static_folder_is_reachable(server: VoiceServer, target: str) -> None:
    status, _, body = await http_get(server.port, target)
    assert status == 404, body[:200]


# ------------------------------------------------------------ admission


async def test_disallowed_origin_is_refused_and_same_origin_accepted(server: VoiceServer) -> None:
    async with connect(ws_url(server), origin="http://evil.example") as ws:  # type: ignore[arg-type]
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1008
    same = f"http://127.0.0.1:{server.port}"
    async with voice_client(ws_url(server), origin=same) as client:
        ready = await client.start()
        assert ready["type"] == "ready"


async def test_over_the_session_limit_is_refused_with_1013(engines: Engines, config: Config) -> None:
    async with (
        running_server(engines, config, max_sessions=1) as srv,
        voice_client(ws_url(srv)) as first,
    ):
        await first.start()
        async with voice_client(ws_url(srv)) as second:
            code, reason = await second.wait_closed()
        assert code == 1013 and reason and "limit" in reason
        await first.send({"type": "nonsense"})  # the first session is unaffected
        error = await first.wait_for(lambda m: m["type"] == "error")
        assert error["code"] == "unknown_type"
        await first.send({"type": "stop"})
        assert await first.wait_closed() == (1000, "session ended by the client")
        assert srv.metrics.sessions_refused == {"limit": 1}


async def test_idle_session_is_closed_with_a_reason(engines: Engines, config: Config) -> None:
    async with running_server(engines, config, idle_timeout_s=0.3) as srv, voice_client(ws_url(srv)) as c:
        await c.start()
        code, reason = await c.wait_closed()
        assert code == 1000 and reason and reason.startswith("idle")


async def test_shutdown_closes_sessions_with_1001(engines: Engines, config: Config) -> None:
    async with running_server(engines, config) as srv, voice_client(ws_url(srv)) as client:
        await client.start()
        client.start_microphone()
        await client.wait_until(lambda: bool(srv.connections))
        (conn,) = srv.connections
        session = conn.session
        await srv.aclose()
        assert await client.wait_closed() == (1001, "server shutting down")
        assert not srv.connections
        assert session is not None and session.unfinished_tasks() == 0


# ------------------------------------------------------------ barge-in


async def test_speaking_over_the_reply_clears_its_audio(server: VoiceServer) -> None:
    """Also a 48 kHz microphone (resampled by the server) and a listener that reports playback."""

    def speech(text: str) -> np.ndarray:
        return resample(espeak(text), 16000, MIC_RATE)

    async with voice_client(ws_url(server), rate_hz=MIC_RATE) as client:
        await client.start(sample_rate=MIC_RATE, output_sample_rate=16000, reports=True)
        listener = client.listener
        assert listener is not None
        client.start_microphone()
        client.say(speech(STORY))
        first = await client.wait_for(lambda m: m["type"] == "assistant.audio", 120)
        story = first["turn_id"]
        two_s = 2 * listener.rate_hz
        await client.wait_until(lambda: listener.played_by_turn.get(story, 0) >= two_s, 60)
        client.say(speech(QUESTION))
        await client.wait_for(lambda m: m["type"] == "audio.clear" and m["turn_id"] == story, 30)
        await client.wait_for(lambda m: m["type"] == "reply.interrupted" and m["turn_id"] == story, 30)
        cut = await client.wait_for(lambda m: m["type"] == "turn.latency" and m["turn_id"] == story, 30)
        assert cut["record"]["interrupted"]
        assert cut["record"]["work"]["audio_heard_s"] >= 2.0  # from the listener's reports
        assert "barge_in_stop" in cut["record"]["stages_ms"]
        answer = await client.wait_for(lambda m: m["type"] == "turn.latency" and m["turn_id"] > story, 120)
        assert word_error_rate(QUESTION, answer["record"]["user_text"]) <= 0.15
        assert answer["record"]["assistant_text"] and not answer["record"]["interrupted"]
