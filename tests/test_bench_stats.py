"""The bench's arithmetic (pure): percentiles, /metrics parsing, CPU utilisation, the ramp rule."""

from __future__ import annotations

import math

import pytest

from voice_pipeline.bench.stats import (
    RampStep,
    Scrape,
    busy_share,
    cpu_summary,
    host_cpu_times,
    labelled,
    metrics_delta,
    parse_metrics,
    ramp_verdict,
    summarize,
)


def test_percentiles_interpolate_and_count_what_is_over_budget() -> None:
    s = summarize([100.0, 200.0, 300.0, 400.0, 1000.0], budget=350.0)
    assert s is not None
    assert (s.n, s.p50, s.mean) == (5, 300.0, 400.0)
    assert s.p95 == pytest.approx(880.0)  # 400 + 0.8 x 600
    assert s.p99 == pytest.approx(976.0)
    assert s.over_budget == 2 and s.over_share == 0.4
    one = summarize([42.0])
    assert one is not None and one.p50 == one.p95 == one.p99 == 42.0 and one.budget is None
    assert summarize([]) is None
    assert summarize([math.nan]) is None
    assert s.as_dict()["over_budget_share"] == 0.4


METRICS = """\
# HELP process_cpu_seconds_total CPU.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
voice_pipeline_budget_violations_total{stage="asr_final"} 3
voice_pipeline_budget_violations_total{stage="voice_to_voice"} 1
voice_pipeline_stage_latency_seconds_bucket{stage="asr_final",le="+Inf"} 9
voice_pipeline_sessions_active 2
garbage line
"""


def test_metrics_text_is_parsed_and_labelled() -> None:
    m = parse_metrics(METRICS)
    assert m["process_cpu_seconds_total"] == 12.5
    assert m['voice_pipeline_stage_latency_seconds_bucket{stage="asr_final",le="+Inf"}'] == 9
    assert labelled(m, "voice_pipeline_budget_violations_total", "stage") == {
        "asr_final": 3,
        "voice_to_voice": 1,
    }
    later = {
        **m,
        'voice_pipeline_budget_violations_total{stage="asr_final"}': 5.0,
        "process_cpu_seconds_total": 20.0,
    }
    delta = metrics_delta(m, later)
    assert delta['voice_pipeline_budget_violations_total{stage="asr_final"}'] == 2
    assert delta["process_cpu_seconds_total"] == 7.5
    assert "voice_pipeline_sessions_active" not in delta  # a gauge has no delta


def scrape(t: float, cpu: float, rss: float = 1e9) -> Scrape:
    return Scrape(
        t,
        {
            "process_cpu_seconds_total": cpu,
            "voice_pipeline_cpu_count": 2.0,
            "process_resident_memory_bytes": rss,
        },
    )


def test_cpu_utilisation_is_cpu_seconds_over_wall_time_times_cpus() -> None:
    c = cpu_summary([scrape(0, 10.0), scrape(2, 11.0, 2e9), scrape(4, 14.0, 1.5e9)])
    assert c is not None
    assert c.utilisation == pytest.approx(4.0 / (4 * 2))
    assert c.peak == pytest.approx(3.0 / (2 * 2))  # the busier interval
    assert (c.rss_before, c.rss_peak, c.rss_after) == (1e9, 2e9, 1.5e9)
    assert cpu_summary([scrape(0, 10.0)]) is None
    assert cpu_summary([Scrape(0, {}), Scrape(1, {})]) is None  # a server without process metrics


@pytest.mark.parametrize(
    ("steps", "go_on", "capacity", "why"),
    [
        ([RampStep(1, 500.0, None)], True, 1, None),
        (
            [RampStep(1, 500.0, None), RampStep(2, 700.0, None), RampStep(3, 900.0, None)],
            False,
            2,
            "budget",
        ),
        ([RampStep(1, 900.0, None)], False, 0, "budget"),
        ([RampStep(1, 500.0, None), RampStep(2, None, "server_limit")], False, 1, "server_limit"),
        ([RampStep(1, 500.0, None), RampStep(2, None, "rate_limit")], False, 1, "rate_limit"),
        ([RampStep(1, 500.0, None), RampStep(2, None, None)], False, 1, "no_turns"),
        ([RampStep(1, 500.0, None), RampStep(2, 600.0, None)], False, 2, "max_sessions"),
    ],
)
def test_the_ramp_stops_at_the_budget_a_refusal_or_its_limit(
    steps: list[RampStep], go_on: bool, capacity: int, why: str | None
) -> None:
    v = ramp_verdict(steps, budget_ms=800.0, max_sessions=2)
    assert (v.go_on, v.capacity, v.stopped_by) == (go_on, capacity, why)


def test_the_bench_machines_busy_share_comes_from_proc_stat() -> None:
    before = host_cpu_times("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n")
    after = host_cpu_times("intr 5\ncpu  250 0 100 950 100 0 0 0 0 0\n")
    assert before == (150.0, 1000.0) and after == (350.0, 1400.0)
    assert busy_share(before, after) == pytest.approx(0.5)  # 200 busy of 400 ticks
    assert busy_share(None, after) is None and busy_share(after, after) is None
    assert host_cpu_times("no cpu line") is None
