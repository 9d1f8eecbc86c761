"""Prometheus text rendering of the server's metrics (pure)."""

from __future__ import annotations

import dataclasses
import re

from test_server_protocol import record

from voice_pipeline import events as ev
from voice_pipeline.ledger import BudgetBreach
from voice_pipeline.server.metrics import ServerMetrics

SAMPLE = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+Inf-]+$')


def values(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        assert SAMPLE.match(line), line
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def test_every_sample_line_is_well_formed_and_typed() -> None:
    text = ServerMetrics().render()
    assert text.endswith("\n")
    typed = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    for name in values(text):
        base = name.split("{")[0]
        assert any(base == t or base.startswith(f"{t}_") for t in typed), name


def test_sessions_and_refusals() -> None:
    m = ServerMetrics()
    m.session_opened()
    m.session_opened()
    m.session_closed()
    m.session_refused("limit")
    m.session_refused("origin")
    m.session_refused("limit")
    v = values(m.render())
    assert v["voice_pipeline_sessions_active"] == 1
    assert v["voice_pipeline_sessions_total"] == 2
    assert v['voice_pipeline_sessions_refused_total{reason="limit"}'] == 2
    assert v['voice_pipeline_sessions_refused_total{reason="origin"}'] == 1


def test_turn_records_feed_turns_barge_ins_budgets_and_histograms() -> None:
    m = ServerMetrics()
    rec = record()
    m.observe(ev.TurnCompleted(1, 0, rec))
    cut = dataclasses.replace(
        rec,
        interrupted=True,
        false_interruptions=2,
        stages_ms={"voice_to_voice": 1200.0, "asr_final": 40.0},
        budgets_broken=(BudgetBreach("voice_to_voice", 1200.0, 800.0), BudgetBreach("asr_final", 40.0, 1.0)),
    )
    m.observe(ev.TurnCompleted(2, 0, cut))
    m.observe(ev.TurnFailed(3, 0, "reply", "boom", False))
    m.observe(ev.SpeechStarted(4, 0))  # not a metric
    v = values(m.render())
    assert v["voice_pipeline_turns_total"] == 2
    assert v["voice_pipeline_barge_ins_total"] == 1
    assert v["voice_pipeline_false_interruptions_total"] == 2
    assert v["voice_pipeline_turn_failures_total"] == 1
    assert v['voice_pipeline_budget_violations_total{stage="voice_to_voice"}'] == 2
    assert v['voice_pipeline_budget_violations_total{stage="asr_final"}'] == 1
    h = "voice_pipeline_stage_latency_seconds"
    assert v[f'{h}_count{{stage="voice_to_voice"}}'] == 2
    assert v[f'{h}_sum{{stage="voice_to_voice"}}'] == 1.7
    assert v[f'{h}_bucket{{stage="voice_to_voice",le="0.5"}}'] == 1  # 0.5 s is inside le=0.5
    assert v[f'{h}_bucket{{stage="voice_to_voice",le="1"}}'] == 1
    assert v[f'{h}_bucket{{stage="voice_to_voice",le="1.5"}}'] == 2
    assert v[f'{h}_bucket{{stage="voice_to_voice",le="+Inf"}}'] == 2
    assert v[f'{h}_count{{stage="barge_in_stop"}}'] == 0  # every stage is listed from the start


def test_buckets_are_cumulative() -> None:
    m = ServerMetrics()
    for ms in (10, 30, 30, 90, 400, 20_000):
        m.observe(ev.TurnCompleted(1, 0, dataclasses.replace(record(), stages_ms={"endpointing": float(ms)})))
    v = values(m.render())
    counts = [
        c
        for k, c in v.items()
        if k.startswith('voice_pipeline_stage_latency_seconds_bucket{stage="endpointing"')
    ]
    assert counts == sorted(counts) and counts[-1] == 6 and counts[-2] == 5
