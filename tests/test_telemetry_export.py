"""The OpenTelemetry export without the models: hand-made turn records of a traced session go
to a collector started here (OTLP/HTTP, decoded with opentelemetry-proto), the LLM client's
``traceparent`` names the span the turn's LLM stage then has, and a collector that is not
there costs one warning."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from otlp_receiver import otlp_receiver
from test_telemetry_spans import ANSWERED, INTERRUPTED, MS, record

from llm.base import ChatMessage
from llm.remote import RemoteVLLM
from voice_pipeline import events as ev
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config, LLMConfig
from voice_pipeline.ledger.ledger import Mark
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.telemetry.config import TelemetryConfig
from voice_pipeline.telemetry.export import Telemetry
from voice_pipeline.telemetry.session import SessionTrace
from voice_pipeline.telemetry.setup import start_telemetry


def telemetry(url: str, **env: str) -> Telemetry:
    cfg = dataclasses.replace(Config(), telemetry=TelemetryConfig(flush_timeout_s=5.0))
    tel = start_telemetry(cfg, {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_SERVICE_NAME": "vp-test", **env})
    assert tel is not None
    return tel


def now_record(marks: dict[Mark, int], base_ns: int, **kw: object) -> TurnRecord:
    """``record(marks)`` with its marks moved to ``base_ns`` on the monotonic clock."""
    rec = record(marks, **kw)  # type: ignore[arg-type]
    return dataclasses.replace(rec, marks_ns={k: v - 1000 * MS + base_ns for k, v in rec.marks_ns.items()})


def test_nothing_configured_nothing_built() -> None:
    assert start_telemetry(Config(), {}) is None


async def test_a_session_and_its_turns_reach_the_collector() -> None:
    with otlp_receiver() as (url, got):
        tel = telemetry(url)
        base = now_ns()
        session = SessionTrace(tel, "s-1", "session")
        session.observe(ev.TurnCompleted(1, 0, dataclasses.replace(now_record(ANSWERED, base), turn_id=1)))
        session.observe(ev.ReplyPaused(2, base + (5000 + 4101 - 1000) * MS))
        second = now_record(INTERRUPTED, base + 5000 * MS, interrupted=True, heard_s=0.5)
        session.observe(ev.TurnCompleted(2, 0, dataclasses.replace(second, turn_id=2)))
        await session.aclose()
        await asyncio.to_thread(tel.shutdown)
    (root,) = got.named("session")
    assert root.parent_id == "" and root.service == "vp-test"
    assert root.attributes["voice.session.id"] == "s-1"
    turns = got.named("turn")
    assert [t.attributes["voice.turn.id"] for t in turns] == [1, 2]
    assert all(t.parent_id == root.span_id and t.trace_id == root.trace_id for t in turns)
    assert {s.trace_id for s in got.spans} == {root.trace_id}
    # explicit times: the marks, on the epoch clock
    assert abs(turns[0].start_ns - time.time_ns()) < 60e9
    assert turns[1].start_ns - turns[0].start_ns == 5000 * MS
    names = [s.name for s in got.children(turns[1])]
    assert names[:6] == ["endpointing", "asr_final", "llm_first_token", "first_clause", "tts_first_audio",
                         "transport"]  # fmt: skip
    assert names[6:] == ["barge_in", "wasted_work"]
    (barge_in,) = [s for s in got.children(turns[1]) if s.name == "barge_in"]
    assert [s.name for s in got.children(barge_in)] == ["barge_in.pause", "barge_in.confirm", "barge_in.stop"]
    # the metrics: the histograms and the counter by end-of-turn rule
    (v2v,) = got.latest("voice.voice_to_voice.duration").values()
    assert v2v.count == 2 and v2v.sum == pytest.approx(2 * 0.901)
    stages = {dict(k)["voice.stage"]: p.count for k, p in got.latest("voice.stage.duration").items()}
    assert stages == {s: 2 for s in ("endpointing", "asr_final", "llm_first_token", "first_clause",
                                     "tts_first_audio", "transport")}  # fmt: skip
    (stop,) = got.latest("voice.barge_in.stop.duration").values()
    assert stop.count == 1 and stop.sum == pytest.approx(0.001)
    rules = {dict(k)["voice.end_of_turn.rule"]: p.as_int for k, p in got.latest("voice.turns").items()}
    assert rules == {"complete": 2}


async def test_the_stage_histogram_follows_each_turn_s_own_path() -> None:
    """A tool turn's stages are its tool path's, and a reply asked for (``response.create``)
    has its own total; before, only the six stages of a spoken turn without tools were
    recorded, and an asked reply's total nowhere."""
    tool = {**ANSWERED, Mark.TOOL_START: 3150, Mark.TOOL_DONE: 3200}
    asked = {
        Mark.REPLY_ASKED: 1000, Mark.TRANSCRIPT_FINAL: 1180, Mark.LLM_FIRST_TOKEN: 1240,
        Mark.FIRST_CLAUSE: 1360, Mark.TTS_FIRST_AUDIO: 1450, Mark.FIRST_AUDIO_SENT: 1460, Mark.TURN_END: 3000,
    }  # fmt: skip
    with otlp_receiver() as (url, got):
        tel = telemetry(url)
        base = now_ns()
        session = SessionTrace(tel, "s-3", "session")
        for n, marks in enumerate((tool, asked), start=1):
            rec = now_record(marks, base + n * 5000 * MS)
            session.observe(ev.TurnCompleted(n, 0, dataclasses.replace(rec, turn_id=n)))
        await session.aclose()
        await asyncio.to_thread(tel.shutdown)
    stages = {dict(k)["voice.stage"]: p.count for k, p in got.latest("voice.stage.duration").items()}
    assert stages == {"endpointing": 1, "asr_final": 2, "llm_first_token": 2, "tool_call": 1, "tool": 1,
                      "tool_answer": 1, "first_clause": 1, "tts_first_audio": 2, "transport": 2}  # fmt: skip
    (v2v,) = got.latest("voice.voice_to_voice.duration").values()
    assert v2v.count == 1 and v2v.sum == pytest.approx(0.901)
    (asked_total,) = got.latest("voice.asked_to_audio.duration").values()
    assert asked_total.count == 1 and asked_total.sum == pytest.approx(0.460)


# ---------------------------------------------------------------- traceparent


@contextlib.asynccontextmanager
async def fake_llm_server() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """An OpenAI-compatible chat endpoint that streams "Paris." and keeps each request's headers."""
    seen: list[dict[str, str]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
        headers = {k.lower(): v for k, v in headers.items()}
        await reader.readexactly(int(headers.get("content-length", "0")))
        seen.append(headers)
        chunk = {"choices": [{"delta": {"content": "Paris."}, "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 9, "completion_tokens": 2}}  # fmt: skip
        body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n")
        writer.write(f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", seen
    finally:
        server.close()
        await server.wait_closed()


async def test_the_llm_request_carries_the_traceparent_of_the_turns_llm_span() -> None:
    async with fake_llm_server() as (llm_url, seen):
        remote = RemoteVLLM(LLMConfig(engine="remote", url=llm_url, remote_model="m"))
        with otlp_receiver() as (url, got):
            tel = telemetry(url)

            async def one_session() -> None:  # the session's own task, as an edge's would be
                session = SessionTrace(tel, "s-2", "session")
                sent = now_ns()
                async for _ in remote.stream([ChatMessage("user", "Capital of France?")], "reply-1"):
                    pass
                marks = {m: ms for m, ms in ANSWERED.items()}
                rec = now_record(marks, sent - (2950 - 1000) * MS)  # the request went out at "2950"
                session.observe(ev.TurnCompleted(1, 0, rec))
                await session.aclose()

            await asyncio.create_task(one_session())
            async for _ in remote.stream([ChatMessage("user", "Outside any session")], "reply-2"):
                pass
            await asyncio.to_thread(tel.shutdown)
        await remote.aclose()
    assert "traceparent" not in seen[1]
    _, trace_id, span_id, _ = seen[0]["traceparent"].split("-")
    (llm,) = got.named("llm_first_token")
    assert (llm.trace_id, llm.span_id) == (trace_id, span_id)
    assert llm.kind == 3  # SPAN_KIND_CLIENT
    assert llm.attributes["gen_ai.operation.name"] == "chat"


# ---------------------------------------------------------------- no collector


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_dead_collector_costs_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    tel = telemetry(url, OTEL_EXPORTER_OTLP_TIMEOUT="1", OTEL_METRIC_EXPORT_INTERVAL="200")
    caplog.set_level(logging.INFO)
    session = SessionTrace(tel, "s-3", "session")
    base = now_ns()
    for i in range(3):
        session.observe(
            ev.TurnCompleted(i + 1, 0, dataclasses.replace(now_record(ANSWERED, base), turn_id=i + 1))
        )
    await asyncio.sleep(0.6)  # a few metric exports fail meanwhile
    await session.aclose()
    await asyncio.to_thread(tel.shutdown)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in warnings] == ["voice_pipeline.telemetry"], [r.getMessage() for r in warnings]
    assert url in warnings[0].getMessage()


# ---------------------------------------------------------------- not configured, badly configured


def test_nothing_of_opentelemetry_is_imported_unless_configured() -> None:
    code = (
        "import sys\n"
        "import voice_pipeline.cli, voice_pipeline.edge, voice_pipeline.engines, llm.remote\n"
        "from voice_pipeline.config import load_config\n"
        "from voice_pipeline.telemetry.setup import start_telemetry\n"
        "assert start_telemetry(load_config(None), {'OTEL_SERVICE_NAME': 'x'}) is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_bad_otel_variable_stops_run_with_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "zipkin"}
    cmd = [sys.executable, "-m", "voice_pipeline.cli", "run", "--output", str(tmp_path / "out.wav")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "voice-pipeline run: error: OTEL_TRACES_EXPORTER: 'zipkin' is not supported (otlp, console or none)"
    )
    assert "Traceback" not in out.stderr
