"""Pure telemetry logic, table-driven: a turn's record -> its span tree, the ``telemetry:``
section and ``OTEL_*`` variables -> what is exported, the LLM request's trace ids."""

from __future__ import annotations

import dataclasses
import json

import pytest

from vad.end_of_turn import Cue, Rule
from voice_pipeline.config import BudgetConfig, load_config
from voice_pipeline.errors import ConfigError
from voice_pipeline.ledger.ledger import CRITICAL_PATH, TOOL_PATH, Mark, TurnLedger
from voice_pipeline.ledger.records import EndOfTurnRecord, FailedStage, SpeculationRecord, TurnRecord
from voice_pipeline.telemetry import context
from voice_pipeline.telemetry.config import TelemetryConfig, resolve
from voice_pipeline.telemetry.spans import CRITICAL, STAGE, SpanSpec, TurnOptions, is_content, turn_span
from voice_pipeline.turntaking.bargein import InterruptionKind

MS = 1_000_000
BUDGET = BudgetConfig()
#: a plain answered turn (ms on the session clock)
ANSWERED = {
    Mark.SPEECH_START: 1000, Mark.SPEECH_END: 2500, Mark.ENDPOINT: 2800, Mark.TRANSCRIPT_FINAL: 2900,
    Mark.LLM_FIRST_TOKEN: 3050, Mark.FIRST_CLAUSE: 3300, Mark.TTS_FIRST_AUDIO: 3400,
    Mark.FIRST_AUDIO_SENT: 3401, Mark.LLM_DONE: 3600, Mark.LAST_AUDIO_SENT: 4000, Mark.TURN_END: 6000,
}  # fmt: skip
#: ... whose reply was paused by speech at 4100, flushed at 4101, cut for good at 4400
INTERRUPTED = {
    **ANSWERED, Mark.BARGE_IN_ONSET: 4100, Mark.FLUSH_SENT: 4101, Mark.BARGE_IN_CONFIRMED: 4400,
    Mark.LLM_ABORTED: 4402, Mark.TTS_STOPPED: 4402, Mark.TURN_END: 4410,
}  # fmt: skip
del INTERRUPTED[Mark.LLM_DONE], INTERRUPTED[Mark.LAST_AUDIO_SENT]


def record(
    marks: dict[Mark, int],
    *,
    interrupted: bool = False,
    tokens: int = 20,
    synthesized_s: float = 2.0,
    heard_s: float = 2.0,
    failed: FailedStage | None = None,
    false_interruptions: int = 0,
) -> TurnRecord:
    """A record as the ledger makes it from ``marks`` (ms)."""
    ledger = TurnLedger(7, BUDGET)
    for mark, ms in sorted(marks.items(), key=lambda kv: kv[1]):
        ledger.mark(mark, ms * MS)
    ledger.llm_tokens, ledger.audio_synthesized_s = tokens, synthesized_s
    ledger.asr_decode_ms, ledger.asr_speculative, ledger.llm_prefetched = 95.5, True, True
    ledger.llm_request(48, 32, 140.0)
    ledger.failed, ledger.false_interruptions = failed, false_interruptions
    ledger.interruption = InterruptionKind.WORDS if interrupted else None
    ledger.end_of_turn = EndOfTurnRecord(Rule.COMPLETE, 300.0, 250.0, 0.93, Cue.COMPLETE)
    return ledger.finish(
        user_text="what is the capital of france",
        assistant_text="The capital of France is Paris. It is a big city.",
        heard_text="The capital of France is Paris." if interrupted else "",
        interrupted=interrupted,
        audio_heard_s=heard_s,
    )


def tree(spec: SpanSpec | None) -> list[tuple[str, int, int]]:
    """(name, start ms, end ms) of every span under the turn, depth first."""
    assert spec is not None
    return [(s.name, s.start_ns // MS, s.end_ns // MS) for s in spec.walk()[1:]]


def span(spec: SpanSpec, name: str) -> SpanSpec:
    (found,) = [s for s in spec.walk() if s.name == name]
    return found


STAGES_OF_ANSWERED = [
    ("endpointing", 2500, 2800), ("asr_final", 2800, 2900), ("llm_first_token", 2900, 3050),
    ("first_clause", 3050, 3300), ("tts_first_audio", 3300, 3400), ("transport", 3400, 3401),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rec", "expected"),
    [
        pytest.param(record(ANSWERED), STAGES_OF_ANSWERED, id="answered"),
        pytest.param(
            record(INTERRUPTED, interrupted=True, heard_s=0.6),
            [
                *STAGES_OF_ANSWERED,
                ("barge_in", 4100, 4402),
                ("barge_in.pause", 4100, 4101),
                ("barge_in.confirm", 4101, 4400),
                ("barge_in.stop", 4400, 4402),
                ("wasted_work", 4101, 4402),
            ],
            id="interrupted",
        ),
        pytest.param(  # the LLM failed: no first token, so no stage after the transcript
            record(
                {m: ANSWERED[m] for m in list(ANSWERED)[:4]} | {Mark.TURN_END: 3500}, failed=FailedStage.LLM
            ),
            STAGES_OF_ANSWERED[:2],
            id="failed",
        ),
        pytest.param(  # an explicit interrupt: decided at once, no pause
            record(
                {**ANSWERED, Mark.BARGE_IN_CONFIRMED: 3700, Mark.LLM_ABORTED: 3705, Mark.TURN_END: 3710},
                interrupted=True,
                heard_s=0.2,
            ),
            [
                *STAGES_OF_ANSWERED,
                ("barge_in", 3700, 3705),
                ("barge_in.stop", 3700, 3705),
                ("wasted_work", 3700, 3705),
            ],
            id="explicit-interrupt",
        ),
    ],
)
def test_the_turn_tree(rec: TurnRecord, expected: list[tuple[str, int, int]]) -> None:
    assert tree(turn_span(rec, TurnOptions(BUDGET))) == expected


def test_a_resumed_pause_then_a_confirmed_one() -> None:
    """A backchannel paused the reply (resumed), then real words cut it: two barge_in spans,
    their times from the session's ReplyPaused / ReplyResumed events."""
    rec = record(INTERRUPTED | {Mark.BARGE_IN_ONSET: 3500, Mark.FLUSH_SENT: 3501}, interrupted=True,
                 heard_s=0.6, false_interruptions=1)  # fmt: skip
    spec = turn_span(rec, TurnOptions(BUDGET), pauses=[3501 * MS, 4101 * MS], resumes=[3900 * MS])
    assert tree(spec)[6:11] == [
        ("barge_in", 3500, 3900), ("barge_in.pause", 3500, 3501), ("barge_in.resume", 3501, 3900),
        ("barge_in", 4101, 4402), ("barge_in.pause", 4101, 4101),
    ]  # fmt: skip
    assert spec is not None
    outcomes = [s.attributes["voice.barge_in.outcome"] for s in spec.children if s.name == "barge_in"]
    assert outcomes == ["resumed", "confirmed"]


@pytest.mark.parametrize("marks", [ANSWERED, INTERRUPTED])
def test_the_stage_spans_add_up_to_voice_to_voice_exactly(marks: dict[Mark, int]) -> None:
    rec = record(marks, interrupted=marks is INTERRUPTED, heard_s=0.6)
    spec = turn_span(rec, TurnOptions(BUDGET))
    assert spec is not None
    stages = [s for s in spec.children if s.attributes.get(CRITICAL) is True]
    assert [s.attributes[STAGE] for s in stages] == [str(s.name) for s in CRITICAL_PATH]
    assert sum(s.end_ns - s.start_ns for s in stages) == (3401 - 2500) * MS
    assert spec.attributes["voice.turn.voice_to_voice_ms"] == rec.stages_ms["voice_to_voice"] == 901.0
    for s in stages:
        assert s.attributes["voice.stage.duration_ms"] == rec.stages_ms[s.name]  # type: ignore[index]


def test_an_asked_reply_s_stages_start_when_it_was_asked() -> None:
    """A reply asked for directly (``response.create``): its spans run from the ask, the
    LLM's among them (before, its path had no start, so it had no ``llm_first_token`` span)."""
    asked = {
        Mark.REPLY_ASKED: 1000, Mark.TRANSCRIPT_FINAL: 1180, Mark.LLM_FIRST_TOKEN: 1240,
        Mark.FIRST_CLAUSE: 1360, Mark.TTS_FIRST_AUDIO: 1450, Mark.FIRST_AUDIO_SENT: 1460, Mark.TURN_END: 3000,
    }  # fmt: skip
    spec = turn_span(record(asked), TurnOptions(BUDGET), llm_span_id=0xABC)
    assert tree(spec) == [
        ("asr_final", 1000, 1180), ("llm_first_token", 1180, 1240), ("first_clause", 1240, 1360),
        ("tts_first_audio", 1360, 1450), ("transport", 1450, 1460),
    ]  # fmt: skip
    assert spec is not None and spec.start_ns == 1000 * MS
    assert span(spec, "llm_first_token").span_id == 0xABC
    assert spec.attributes["voice.turn.asked_to_audio_ms"] == 460.0
    assert "voice.turn.voice_to_voice_ms" not in spec.attributes


def test_turn_and_stage_attributes() -> None:
    rec = record(ANSWERED)
    spec = turn_span(rec, TurnOptions(BUDGET, model="smollm2"), llm_span_id=0xABC)
    assert spec is not None
    a = spec.attributes
    assert (a["voice.turn.id"], a["voice.turn.interrupted"], a["voice.end_of_turn.rule"]) == (
        7,
        False,
        "complete",
    )
    # 900 ms > the 800 ms budget; endpointing 300 > 400? no; first_clause 250 = 250: not broken
    assert a["voice.turn.budgets_broken"] == ("voice_to_voice",)
    eot = span(spec, "endpointing").attributes
    assert (eot["voice.end_of_turn.wait_ms"], eot["voice.end_of_turn.p_complete"]) == (250.0, 0.93)
    assert eot["voice.end_of_turn.patience_ms"] == 0.0  # no continuation before it
    asr = span(spec, "asr_final").attributes
    assert (asr["voice.asr.decode_ms"], asr["voice.asr.speculative"]) == (95.5, True)
    llm = span(spec, "llm_first_token")
    assert llm.client and llm.span_id == 0xABC
    assert {k: llm.attributes[k] for k in llm.attributes if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm", "gen_ai.request.model": "smollm2",
        "gen_ai.usage.input_tokens": 48, "gen_ai.usage.cache_read.input_tokens": 32,
        "gen_ai.usage.output_tokens": 20,
    }  # fmt: skip
    assert llm.attributes["voice.llm.prefetched"] is True
    assert span(spec, "transport").attributes["voice.stage.over_budget"] is False


def test_the_turn_says_what_its_speculative_replies_did() -> None:
    rec = dataclasses.replace(record(ANSWERED), speculation=SpeculationRecord(2, 2, 1, 1, 0, 6, 0.4))
    spec = turn_span(rec, TurnOptions(BUDGET))
    assert spec is not None
    got = {k: v for k, v in spec.attributes.items() if k.startswith("voice.speculation.")}
    assert got == {
        "voice.speculation.prepared": 2, "voice.speculation.held": 2, "voice.speculation.released": 1,
        "voice.speculation.dropped": 1, "voice.speculation.skipped": 0, "voice.speculation.wasted_tokens": 6,
        "voice.speculation.wasted_audio_s": 0.4,
    }  # fmt: skip
    bare = turn_span(record(ANSWERED), TurnOptions(BUDGET))
    assert bare is not None and not any(k.startswith("voice.speculation.") for k in bare.attributes)


def test_a_failed_turn_is_an_error() -> None:
    marks = {m: ANSWERED[m] for m in list(ANSWERED)[:4]} | {Mark.TURN_END: 3500}
    spec = turn_span(record(marks, failed=FailedStage.LLM), TurnOptions(BUDGET))
    assert spec is not None and spec.error == "llm failed"
    assert spec.attributes["voice.turn.failed_stage"] == "llm"
    assert "voice.turn.voice_to_voice_ms" not in spec.attributes


def test_wasted_work_says_what_nobody_heard() -> None:
    spec = turn_span(record(INTERRUPTED, interrupted=True, heard_s=0.5), TurnOptions(BUDGET))
    assert spec is not None
    a = span(spec, "wasted_work").attributes
    assert (a["voice.work.wasted_audio_s"], a["voice.work.audio_heard_s"]) == (1.5, 0.5)
    assert a["voice.work.wasted_tokens"] == round(20 * (1 - 31 / 49))


@pytest.mark.parametrize("include_text", [False, True])
def test_text_only_when_included(include_text: bool) -> None:
    spec = turn_span(record(INTERRUPTED, interrupted=True), TurnOptions(BUDGET, include_text=include_text))
    assert spec is not None
    keys = {k for s in spec.walk() for k in s.attributes}
    content = {k for k in keys if is_content(k)}
    values = [v for s in spec.walk() for v in s.attributes.values() if isinstance(v, str)]
    if not include_text:
        assert content == set()
        assert not any("france" in v.lower() for v in values)
        return
    assert content == {
        "voice.content.user_text", "voice.content.assistant_text", "voice.content.heard_text",
        "gen_ai.input.messages", "gen_ai.output.messages",
    }  # fmt: skip
    assert spec.attributes["voice.content.heard_text"] == "The capital of France is Paris."
    messages = json.loads(str(span(spec, "llm_first_token").attributes["gen_ai.input.messages"]))
    assert messages == [
        {"role": "user", "parts": [{"type": "text", "content": "what is the capital of france"}]}
    ]


def test_a_record_without_marks_has_no_span() -> None:
    rec = record({})
    assert turn_span(rec, TurnOptions(BUDGET)) is None


# ---------------------------------------------------------------- config and environment

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"}


@pytest.mark.parametrize(
    ("cfg", "environ", "traces", "metrics"),
    [
        (TelemetryConfig(), {}, None, None),  # nothing configured: nothing
        (TelemetryConfig(), ENDPOINT, "http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318/v1/metrics"),
        (
            TelemetryConfig(enabled=True),
            {},
            "http://localhost:4318/v1/traces",
            "http://localhost:4318/v1/metrics",
        ),
        (TelemetryConfig(enabled=False), ENDPOINT, None, None),
        (TelemetryConfig(), {**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, None, None),
        (
            TelemetryConfig(),
            {**ENDPOINT, "OTEL_METRICS_EXPORTER": "none"},
            "http://127.0.0.1:4318/v1/traces",
            None,
        ),
        (
            TelemetryConfig(),
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:1/t"},
            "http://h:1/t",
            "http://localhost:4318/v1/metrics",
        ),
        (TelemetryConfig(), {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}, None, None),
    ],
)
def test_what_is_exported_where(
    cfg: TelemetryConfig, environ: dict[str, str], traces: str | None, metrics: str | None
) -> None:
    settings = resolve(cfg, environ)
    got = None if settings is None else (settings.traces, settings.metrics)
    ends = (None, None) if got is None else tuple(None if s is None else s.endpoint for s in got)
    assert ends == (traces, metrics)


def test_environment_details() -> None:
    environ = {
        **ENDPOINT,
        "OTEL_SERVICE_NAME": "agent-7",
        "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s%3Dx,team=a",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2.5",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }
    settings = resolve(TelemetryConfig(include_text=True), environ)
    assert settings is not None and settings.traces is not None and settings.metrics is not None
    assert (settings.service_name, settings.include_text, settings.metric_interval_ms) == (
        "agent-7",
        True,
        500,
    )
    assert settings.traces.exporter == "console" and settings.metrics.exporter == "otlp"
    assert settings.metrics.headers == (("api-key", "s=x"), ("team", "a"))
    assert settings.metrics.timeout_s == 2.5


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER: 'zipkin' is not supported"),
        (
            {**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json'",
        ),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "is not an http:// or https:// URL"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, "OTEL_EXPORTER_OTLP_TIMEOUT: 'soon'"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS: 'novalue'"),
        ({**ENDPOINT, "OTEL_METRIC_EXPORT_INTERVAL": "-1"}, "OTEL_METRIC_EXPORT_INTERVAL"),
    ],
)
def test_a_bad_variable_is_a_one_line_error(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve(TelemetryConfig(), environ)


def test_the_telemetry_section_is_read_and_checked(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "c.yaml"
    path.write_text("telemetry:\n  include_text: true\n  enabled: true\n")
    assert load_config(path).telemetry == TelemetryConfig(enabled=True, include_text=True)
    path.write_text("telemetry:\n  include_txt: true\n")
    with pytest.raises(ConfigError, match="telemetry: unknown key"):
        load_config(path)
    path.write_text("telemetry:\n  flush_timeout_s: 0\n")
    with pytest.raises(ConfigError, match=r"telemetry\.flush_timeout_s: must be > 0"):
        load_config(path)


# ---------------------------------------------------------------- the LLM request's ids


def test_a_turn_takes_the_latest_request_sent_in_its_window() -> None:
    now = [100]
    ids = context.SessionIds(trace_id=0x1234, clock=lambda: now[0])
    spans = []
    for t in (100, 200, 300, 900):  # an old turn's, a dropped prefetch, this turn's, a later one
        now[0] = t
        spans.append(ids.request())
    assert ids.take_request(150, 500) == spans[2]
    assert ids.take_request(150, 500) is None  # claimed, and the older ones forgotten
    assert ids.take_request(None, 1000) == spans[3]
    assert ids.take_request(0, None) is None


def test_no_traceparent_outside_a_traced_session() -> None:
    import contextvars

    def inside() -> tuple[dict[str, str], dict[str, str]]:
        before = context.llm_headers()
        ids = context.SessionIds(trace_id=0xABCDEF)
        context.enter(ids)
        header = context.llm_headers()
        ids.closed = True
        assert context.llm_headers() == {}
        return before, header

    before, header = contextvars.copy_context().run(inside)
    assert before == {}
    version, trace_id, span_id, flags = header["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", f"{0xABCDEF:032x}", "01") and len(span_id) == 16
    assert context.llm_headers() == {}  # the session's context did not leak here


def test_a_tool_turn_s_spans_follow_the_tool_path() -> None:
    marks = {**ANSWERED, Mark.TOOL_START: 3150, Mark.TOOL_DONE: 3200}
    spec = turn_span(record(marks), TurnOptions(BUDGET))
    assert spec is not None
    names = [name for name, _, _ in tree(spec) if name in {s.name for s in TOOL_PATH}]
    assert names == [s.name for s in TOOL_PATH]  # tool_call, tool, tool_answer: no first_clause
    assert (span(spec, "tool").start_ns // MS, span(spec, "tool").end_ns // MS) == (3150, 3200)
