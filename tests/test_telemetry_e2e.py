"""OpenTelemetry end to end with the real models: ``run`` and ``serve`` export each turn's spans
and metrics to an OTLP/HTTP collector started by the test (decoded with opentelemetry-proto).

Questions are spoken by espeak-ng and streamed in real time, as in test_e2e_run.py and
test_e2e_bargein.py. The exporter is built from ``OTEL_*`` variables by the same function
``run`` and ``serve`` call (:func:`voice_pipeline.telemetry.setup.start_telemetry`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from otlp_receiver import Received, ReceivedSpan, otlp_receiver
from servers import running_server, ws_url
from speech import concat, espeak, normalize, silence
from wsclient import voice_client

from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.ledger.ledger import CRITICAL_PATH
from voice_pipeline.runner import RunResult, run_audio, write_report
from voice_pipeline.telemetry.config import TelemetryConfig
from voice_pipeline.telemetry.export import Telemetry
from voice_pipeline.telemetry.setup import start_telemetry
from voice_pipeline.telemetry.spans import CRITICAL, is_content

pytestmark = pytest.mark.real_models

RATE = 16000
QUESTIONS = ("What is the capital of France?", "Name one planet in our solar system.")
STORY = "Tell me a long story about a brave knight and a dragon."


def traced(
    engines: Engines, config: Config, url: str, include_text: bool, **env: str
) -> tuple[Engines, Telemetry]:
    """The shared engines with a telemetry of their own (never aclose() these: the models are shared)."""
    cfg = dataclasses.replace(
        config, telemetry=TelemetryConfig(include_text=include_text, flush_timeout_s=10.0)
    )
    tel = start_telemetry(cfg, {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_SERVICE_NAME": "vp-e2e", **env})
    assert tel is not None
    return dataclasses.replace(engines, telemetry=tel), tel


def stages(got: Received, turn: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in got.children(turn) if s.attributes.get(CRITICAL) is True]


def content_keys(spans: list[ReceivedSpan]) -> set[str]:
    return {k for s in spans for k in s.attributes if is_content(k)}


# ---------------------------------------------------------------- run: two questions


@dataclasses.dataclass
class Traced:
    result: RunResult
    report: dict[str, Any]
    got: Received


@pytest.fixture(scope="module")
async def two_turns(engines: Engines, config: Config, tmp_path_factory: pytest.TempPathFactory) -> Traced:
    audio = concat(silence(0.5), espeak(QUESTIONS[0]), silence(6.0), espeak(QUESTIONS[1]), silence(6.0))
    with otlp_receiver() as (url, got):
        traced_engines, tel = traced(engines, config, url, include_text=False)
        result = await asyncio.wait_for(run_audio(traced_engines, config, audio, RATE), timeout=120)
        await asyncio.to_thread(tel.shutdown)  # what `run` does on its way out (Engines.aclose)
    path = tmp_path_factory.mktemp("report") / "report.json"
    write_report(path, result, None)
    return Traced(result, json.loads(path.read_text()), got)


def test_one_turn_span_per_user_turn_in_one_session_trace(two_turns: Traced) -> None:
    got = two_turns.got
    (session,) = got.named("session")
    turns = got.named("turn")
    assert len(turns) == len(two_turns.result.records) == 2
    assert [t.attributes["voice.turn.id"] for t in turns] == [r.turn_id for r in two_turns.result.records]
    assert all(t.parent_id == session.span_id for t in turns)
    assert {s.trace_id for s in got.spans} == {session.trace_id}
    assert all(s.service == "vp-e2e" for s in got.spans)


def test_the_stage_children_add_up_to_voice_to_voice(two_turns: Traced) -> None:
    got = two_turns.got
    for turn in got.named("turn"):
        children = stages(got, turn)
        assert [s.name for s in children] == [str(s.name) for s in CRITICAL_PATH]
        for a, b in itertools.pairwise(children):
            assert a.end_ns == b.start_ns  # consecutive: one stage ends where the next begins
        v2v_ms = (children[-1].end_ns - children[0].start_ns) / 1e6
        assert abs(sum(s.ms for s in children) - v2v_ms) < 1e-6
        assert abs(v2v_ms - turn.attributes["voice.turn.voice_to_voice_ms"]) < 1e-3


def test_the_turn_attribute_equals_the_json_report(two_turns: Traced) -> None:
    for turn, reported in zip(two_turns.got.named("turn"), two_turns.report["turns"], strict=True):
        assert turn.attributes["voice.turn.id"] == reported["turn_id"]
        assert (
            abs(turn.attributes["voice.turn.voice_to_voice_ms"] - reported["stages_ms"]["voice_to_voice"])
            < 1.0
        )
        for stage in stages(two_turns.got, turn):
            assert abs(stage.ms - reported["stages_ms"][stage.name]) < 1.0


def test_the_llm_span_follows_the_genai_conventions(two_turns: Traced) -> None:
    for llm, rec in zip(two_turns.got.named("llm_first_token"), two_turns.result.records, strict=True):
        a = llm.attributes
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "vllm"
        assert a["gen_ai.usage.output_tokens"] == rec.work.llm_tokens > 0
        assert a["gen_ai.usage.input_tokens"] == rec.llm_prompt_tokens > 0


def test_no_text_leaves_by_default(two_turns: Traced) -> None:
    assert content_keys(two_turns.got.spans) == set()
    values = " ".join(str(v) for s in two_turns.got.spans for v in s.attributes.values()).lower()
    assert "france" not in values and "paris" not in values


def test_the_metrics_count_the_turns(two_turns: Traced) -> None:
    got = two_turns.got
    (v2v,) = got.latest("voice.voice_to_voice.duration").values()
    assert v2v.count == 2
    expected = sum(r.stages_ms["voice_to_voice"] for r in two_turns.result.records) / 1000  # type: ignore[index]
    assert v2v.sum == pytest.approx(expected)
    by_rule = {dict(k)["voice.end_of_turn.rule"]: p.as_int for k, p in got.latest("voice.turns").items()}
    expected_rules = [str(r.end_of_turn.rule) for r in two_turns.result.records if r.end_of_turn is not None]
    assert sum(by_rule.values()) == 2 and sorted(by_rule) == sorted(set(expected_rules))
    stage_counts = {dict(k)["voice.stage"]: p.count for k, p in got.latest("voice.stage.duration").items()}
    assert stage_counts == {str(s.name): 2 for s in CRITICAL_PATH}


# ---------------------------------------------------------------- run: an interrupted reply, with text


@pytest.fixture(scope="module")
async def interrupted(engines: Engines, config: Config) -> tuple[RunResult, Received]:
    """A story request, then 3.5 s after it a new question over the reply."""
    story, question = espeak(STORY), espeak(QUESTIONS[0])
    audio = concat(silence(0.5), story, silence(3.5), question, silence(7.0))
    with otlp_receiver() as (url, got):
        traced_engines, tel = traced(engines, config, url, include_text=True)
        result = await asyncio.wait_for(run_audio(traced_engines, config, audio, RATE), timeout=120)
        await asyncio.to_thread(tel.shutdown)
    return result, got


def test_an_interrupted_reply_has_its_barge_in_spans(interrupted: tuple[RunResult, Received]) -> None:
    result, got = interrupted
    cut = [r for r in result.records if r.interrupted]
    assert cut, [(r.user_text, r.interrupted) for r in result.records]
    (turn,) = [t for t in got.named("turn") if t.attributes["voice.turn.id"] == cut[0].turn_id]
    assert turn.attributes["voice.turn.interrupted"] is True
    (barge_in,) = [s for s in got.children(turn) if s.name == "barge_in"]
    assert barge_in.attributes["voice.barge_in.outcome"] == "confirmed"
    parts = {s.name: s for s in got.children(barge_in)}
    assert list(parts) == ["barge_in.pause", "barge_in.confirm", "barge_in.stop"]
    # the pause is the ledger's barge_in_stop: onset of the speech over the reply -> flushed
    assert abs(parts["barge_in.pause"].ms - cut[0].stages_ms["barge_in_stop"]) < 1e-3  # type: ignore[index]
    assert parts["barge_in.pause"].end_ns == parts["barge_in.confirm"].start_ns
    # the unheard rest was generated for nothing (its audio too, unless the cut fell in a
    # playback gap: a loaded 2-core AVX2 host, 92 ms a token); the span says what the ledger says
    (wasted,) = [s for s in got.children(turn) if s.name == "wasted_work"]
    work = cut[0].work
    assert wasted.attributes["voice.work.wasted_tokens"] == work.wasted_tokens > 0
    assert wasted.attributes["voice.work.wasted_audio_s"] == pytest.approx(work.wasted_audio_s, abs=1e-3)


def test_text_is_on_the_spans_when_enabled(interrupted: tuple[RunResult, Received]) -> None:
    result, got = interrupted
    assert {"voice.content.user_text", "gen_ai.input.messages"} <= content_keys(got.spans)
    by_id = {t.attributes["voice.turn.id"]: t for t in got.named("turn")}
    for rec in result.records:
        a = by_id[rec.turn_id].attributes
        assert (a["voice.content.user_text"], a["voice.content.heard_text"]) == (
            rec.user_text,
            rec.heard_text,
        )


# ---------------------------------------------------------------- a collector that is not there


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_dead_collector_costs_no_turn(
    engines: Engines, config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    url = f"http://127.0.0.1:{closed_port()}"
    quick = {"OTEL_EXPORTER_OTLP_TIMEOUT": "1", "OTEL_METRIC_EXPORT_INTERVAL": "500"}
    traced_engines, tel = traced(engines, config, url, include_text=False, **quick)
    audio = concat(silence(0.5), espeak(QUESTIONS[0]), silence(6.0))
    result = await asyncio.wait_for(run_audio(traced_engines, config, audio, RATE), timeout=120)
    await asyncio.to_thread(tel.shutdown)
    assert len(result.records) == 1
    rec = result.records[0]
    assert "paris" in normalize(rec.assistant_text) and rec.failed is None
    assert rec.work.audio_heard_s > 0.5
    ours = [
        r for r in caplog.records if r.name == "voice_pipeline.telemetry" and r.levelno >= logging.WARNING
    ]
    assert len(ours) == 1 and url in ours[0].getMessage()
    assert not [
        r for r in caplog.records if r.name.startswith("opentelemetry") and r.levelno >= logging.WARNING
    ]


# ---------------------------------------------------------------- serve: two sessions at once


@pytest.fixture
def collector() -> Iterator[tuple[str, Received]]:
    with otlp_receiver() as found:
        yield found


async def test_serve_two_concurrent_sessions_keep_their_traces_apart(
    engines: Engines, config: Config, collector: tuple[str, Received]
) -> None:
    url, got = collector
    traced_engines, tel = traced(engines, config, url, include_text=True)

    async def converse(srv: Any, question: str) -> dict[str, Any]:
        async with voice_client(ws_url(srv)) as client:
            await client.start()
            client.start_microphone()
            client.say(espeak(question))
            latency: dict[str, Any] = await client.wait_for(lambda m: m["type"] == "turn.latency", 120)
            return latency

    async with running_server(traced_engines, config, max_sessions=2) as srv:
        latencies = await asyncio.gather(*(converse(srv, q) for q in QUESTIONS))
    await asyncio.to_thread(tel.shutdown)
    sessions = got.named("session")
    assert len(sessions) == 2 and sessions[0].trace_id != sessions[1].trace_id
    for session in sessions:
        spans = [s for s in got.spans if s.trace_id == session.trace_id]
        turns = [s for s in spans if s.name == "turn"]
        assert len(turns) == 1 and turns[0].parent_id == session.span_id
        assert all(s.span_id in {x.span_id for x in spans} for s in spans if s.parent_id and s is not session)
        assert turns[0].attributes["voice.session.id"] == session.attributes["voice.session.id"]
    words = {
        s.trace_id: normalize(str(t.attributes["voice.content.user_text"]))
        for s in sessions
        for t in got.named("turn")
        if t.trace_id == s.trace_id
    }
    assert sorted("france" in w for w in words.values()) == [False, True], words
    assert sorted("planet" in w for w in words.values()) == [False, True], words
    reported = sorted(round(m["record"]["stages_ms"]["voice_to_voice"], 1) for m in latencies)
    attrs = sorted(round(t.attributes["voice.turn.voice_to_voice_ms"], 1) for t in got.named("turn"))
    assert np.allclose(reported, attrs, atol=1.0)
