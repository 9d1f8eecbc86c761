"""Prometheus text rendering of the server's metrics (pure)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_server_protocol import record

from voice_pipeline import events as ev
from voice_pipeline.ledger.records import BudgetBreach, EndOfTurnRecord
from voice_pipeline.server.metrics import ProcessStats, ProcessTree, ServerMetrics, parse_proc_stat

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
    m.endpoint_opened("ws")
    m.session_opened()
    m.endpoint_opened("realtime")
    m.session_closed()
    m.session_refused("limit")
    m.session_refused("origin")
    m.session_refused("limit")
    v = values(m.render())
    assert v["voice_pipeline_sessions_active"] == 1
    assert v["voice_pipeline_sessions_total"] == 2
    assert v['voice_pipeline_sessions_refused_total{reason="limit"}'] == 2
    assert v['voice_pipeline_sessions_refused_total{reason="origin"}'] == 1
    assert v['voice_pipeline_endpoint_sessions_total{endpoint="ws"}'] == 1
    assert v['voice_pipeline_endpoint_sessions_total{endpoint="realtime"}'] == 1


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


def test_end_of_turn_rules_and_continuations_are_counted() -> None:
    m = ServerMetrics()
    base = record()
    for rule in ("complete", "complete", "incomplete", "max_turn"):
        eot = EndOfTurnRecord(rule=rule, silence_ms=300.0, wait_ms=250.0, p_complete=0.9, cue="neutral")
        m.observe(ev.TurnCompleted(1, 0, dataclasses.replace(base, end_of_turn=eot)))
    m.observe(ev.TurnCompleted(2, 0, base))  # no end of turn (never ended on its own)
    m.observe(ev.TurnContinued(3, 0))
    m.observe(ev.TurnContinued(3, 0))
    v = values(m.render())
    assert v['voice_pipeline_end_of_turn_total{rule="complete"}'] == 2
    assert v['voice_pipeline_end_of_turn_total{rule="incomplete"}'] == 1
    assert v['voice_pipeline_end_of_turn_total{rule="max_turn"}'] == 1
    assert v["voice_pipeline_continuations_total"] == 2
    assert v["voice_pipeline_turns_total"] == 5
    assert not any(k.startswith("voice_pipeline_ends_undone_total") for k in v)


def test_ends_the_user_undid_are_counted_by_the_rule_that_made_them() -> None:
    m = ServerMetrics()
    early = EndOfTurnRecord(rule="complete", silence_ms=256.0, wait_ms=250.0, p_complete=0.95, cue="neutral")
    unsure = dataclasses.replace(early, rule="unsure")
    last = dataclasses.replace(early, rule="incomplete", silence_ms=2016.0)
    rec = dataclasses.replace(record(), end_of_turn=last, continuations=3, undone_ends=(early, early, unsure))
    m.observe(ev.TurnCompleted(1, 0, rec))
    v = values(m.render())
    assert v['voice_pipeline_ends_undone_total{rule="complete"}'] == 2
    assert v['voice_pipeline_ends_undone_total{rule="unsure"}'] == 1
    assert v['voice_pipeline_end_of_turn_total{rule="incomplete"}'] == 1


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


# ------------------------------------------------------------ budget share and the process tree


def test_over_budget_ratio_is_taken_over_each_stages_last_n_measurements() -> None:
    m = ServerMetrics(budget_window=4, process_stats=lambda: None)
    rec = record()
    over = dataclasses.replace(
        rec,
        stages_ms={"asr_final": 400.0, "voice_to_voice": 900.0},
        budgets_broken=(BudgetBreach("asr_final", 400.0, 150.0),),
    )
    ok = dataclasses.replace(rec, stages_ms={"asr_final": 40.0, "voice_to_voice": 500.0}, budgets_broken=())
    for r in (over, over, over, ok, ok):  # the first `over` falls out of the 4-turn window
        m.observe(ev.TurnCompleted(1, 0, r))
    v = values(m.render())
    assert v['voice_pipeline_stage_over_budget_ratio{stage="asr_final"}'] == 0.5
    assert v['voice_pipeline_stage_over_budget_ratio{stage="voice_to_voice"}'] == 0
    assert v['voice_pipeline_stage_over_budget_window_turns{stage="asr_final"}'] == 4
    assert 'voice_pipeline_stage_over_budget_ratio{stage="barge_in_stop"}' not in v  # never measured
    assert "process_cpu_seconds_total" not in v  # no process stats here: no lines, no error


def test_process_metrics_render_what_the_probe_reads() -> None:
    stats = ProcessStats(cpu_seconds=12.5, resident_bytes=3_000_000_000, processes=3, cpu_count=2.0)
    v = values(ServerMetrics(process_stats=lambda: stats).render())
    assert v["process_cpu_seconds_total"] == 12.5
    assert v["process_resident_memory_bytes"] == 3_000_000_000
    assert v["voice_pipeline_processes"] == 3
    assert v["voice_pipeline_cpu_count"] == 2


def test_parse_proc_stat_survives_a_name_with_spaces_and_parentheses() -> None:
    fields = ["S", "77", *["0"] * 9, "150", "50", *["0"] * 6, "999", "0", "321"]
    assert parse_proc_stat(f"1234 (a (b) c) {' '.join(fields)}") == (77, 200, 321)


def _stat(pid: int, ppid: int, ticks: int, start: int = 1) -> str:
    fields = ["S", str(ppid), *["0"] * 9, str(ticks), "0", *["0"] * 6, str(start), "0", "10"]
    return f"{pid} (p{pid}) {' '.join(fields)}"


def test_process_tree_sums_descendants_and_stays_monotonic_when_one_exits(tmp_path: Path) -> None:
    def write(procs: dict[int, str]) -> None:
        for d in tmp_path.iterdir():
            (d / "stat").unlink()
            d.rmdir()
        for pid, text in procs.items():
            (tmp_path / str(pid)).mkdir()
            (tmp_path / str(pid) / "stat").write_text(text)

    tick = os.sysconf("SC_CLK_TCK")
    write({10: _stat(10, 1, 100), 11: _stat(11, 10, 50), 12: _stat(12, 11, 30), 99: _stat(99, 1, 1000)})
    tree = ProcessTree(10, tmp_path)
    first = tree.read()
    assert first is not None and first.processes == 3  # 99 is not a descendant
    assert first.cpu_seconds == pytest.approx(180 / tick)
    assert first.resident_bytes == 3 * 10 * os.sysconf("SC_PAGE_SIZE")
    write({10: _stat(10, 1, 110), 11: _stat(11, 10, 50)})  # the grandchild exited
    second = tree.read()
    assert second is not None and second.processes == 2
    assert second.cpu_seconds == pytest.approx(190 / tick)  # its 30 ticks still count
    write({10: _stat(10, 1, 120), 11: _stat(11, 10, 50), 12: _stat(12, 11, 5, start=7)})  # pid reused
    third = tree.read()
    assert third is not None and third.cpu_seconds == pytest.approx(205 / tick)
    assert ProcessTree(4242, tmp_path).read() is None  # no such process: no figures


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="/proc is Linux's")
def test_the_real_process_tree_counts_a_busy_child() -> None:
    tree = ProcessTree()
    before = tree.read()
    assert before is not None and before.cpu_count >= 1
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        deadline = time.monotonic() + 30
        while True:
            now = tree.read()
            assert now is not None
            if now.processes >= before.processes + 1 and now.cpu_seconds >= before.cpu_seconds + 0.3:
                break
            assert time.monotonic() < deadline, (before, now)
            time.sleep(0.1)
    finally:
        child.kill()
        child.wait()
