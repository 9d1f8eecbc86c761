"""The bench's arithmetic (pure): percentiles, per-stage summaries, /metrics
scrapes and CPU utilisation, and the ramp's stop rule."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from voice_pipeline.ledger.aggregate import percentile

#: past this server CPU utilisation queueing makes latency climb steeply: the report warns
CPU_WARN = 0.70
#: a stage over budget in more than this share of turns is listed in the report
OVER_BUDGET_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class Summary:
    n: int
    p50: float
    p95: float
    p99: float
    mean: float
    budget: float | None
    over_budget: int  # values over the budget

    @property
    def over_share(self) -> float:
        return self.over_budget / self.n if self.n else 0.0

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "n": self.n,
            "p50": round(self.p50, 1),
            "p95": round(self.p95, 1),
            "p99": round(self.p99, 1),
            "mean": round(self.mean, 1),
            "budget": self.budget,
            "over_budget": self.over_budget,
            "over_budget_share": round(self.over_share, 3),
        }


def summarize(values: Iterable[float], budget: float | None = None) -> Summary | None:
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return None
    over = sum(v > budget for v in xs) if budget is not None else 0
    return Summary(
        len(xs), percentile(xs, 50), percentile(xs, 95), percentile(xs, 99), sum(xs) / len(xs), budget, over
    )


# ------------------------------------------------------------ /metrics

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {"name{labels}": value}; comments and unparsable lines are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if m is None:
            continue
        try:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        except ValueError:
            continue
    return out


def labelled(metrics: Mapping[str, float], name: str, label: str) -> dict[str, float]:
    """{label value: sample} of metric ``name`` with one label, e.g. stage."""
    prefix = name + "{" + label + '="'
    return {k[len(prefix) : k.index('"', len(prefix))]: v for k, v in metrics.items() if k.startswith(prefix)}


@dataclass(frozen=True, slots=True)
class Scrape:
    t: float  # seconds (the bench's monotonic clock)
    metrics: dict[str, float]


CPU_SECONDS = "process_cpu_seconds_total"
RSS_BYTES = "process_resident_memory_bytes"
CPU_COUNT = "voice_pipeline_cpu_count"


@dataclass(frozen=True, slots=True)
class CpuSummary:
    utilisation: float  # over the whole step: CPU seconds / (wall seconds x CPUs)
    peak: float  # the busiest interval between two scrapes
    cpu_count: float
    cpu_seconds: float
    wall_s: float
    rss_before: float
    rss_peak: float
    rss_after: float

    def as_dict(self) -> dict[str, float]:
        return {
            "utilisation": round(self.utilisation, 3),
            "peak_interval_utilisation": round(self.peak, 3),
            "cpu_count": self.cpu_count,
            "cpu_seconds": round(self.cpu_seconds, 2),
            "wall_s": round(self.wall_s, 2),
            "rss_before_bytes": self.rss_before,
            "rss_peak_bytes": self.rss_peak,
            "rss_after_bytes": self.rss_after,
        }


def cpu_summary(scrapes: Sequence[Scrape]) -> CpuSummary | None:
    """Server CPU utilisation between the first and last scrape (None: no process metrics)."""
    usable = [s for s in scrapes if CPU_SECONDS in s.metrics and CPU_COUNT in s.metrics]
    if len(usable) < 2 or usable[-1].t <= usable[0].t:
        return None
    cpus = usable[-1].metrics[CPU_COUNT] or 1.0
    first, last = usable[0], usable[-1]
    wall = last.t - first.t
    used = last.metrics[CPU_SECONDS] - first.metrics[CPU_SECONDS]
    peak = max(
        (b.metrics[CPU_SECONDS] - a.metrics[CPU_SECONDS]) / ((b.t - a.t) * cpus)
        for a, b in itertools.pairwise(usable)
        if b.t > a.t
    )
    rss = [s.metrics.get(RSS_BYTES, math.nan) for s in usable]
    return CpuSummary(used / (wall * cpus), peak, cpus, used, wall, rss[0], max(rss), rss[-1])


def metrics_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Counters' increase over the step (``*_total`` and histogram ``_count``/``_sum``/``_bucket``)."""
    out = {}
    for key, value in after.items():
        base = key.split("{", 1)[0]
        if base.endswith(("_total", "_count", "_sum", "_bucket")):
            out[key] = round(value - before.get(key, 0.0), 6)
    return out


def host_cpu_times(proc_stat: str) -> tuple[float, float] | None:
    """``/proc/stat`` -> (busy, total) clock ticks of all CPUs (idle and iowait are not busy)."""
    for line in proc_stat.splitlines():
        if line.startswith("cpu "):
            ticks = [float(x) for x in line.split()[1:]]
            total = sum(ticks[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
            return total - ticks[3] - (ticks[4] if len(ticks) > 4 else 0.0), total
    return None


def busy_share(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


# ------------------------------------------------------------ the ramp


@dataclass(frozen=True, slots=True)
class RampStep:
    sessions: int
    p95_v2v_ms: float | None  # None: no turn measured
    refused: str | None  # the server refused a session: "server_limit" (1013) or "rate_limit" (429)


@dataclass(frozen=True, slots=True)
class RampVerdict:
    go_on: bool
    capacity: int  # the most sessions that kept p95 voice-to-voice within budget so far
    stopped_by: str | None  # "budget", "server_limit", "rate_limit", "max_sessions", "no_turns"


def ramp_verdict(steps: Sequence[RampStep], budget_ms: float, max_sessions: int) -> RampVerdict:
    """After each ramp step: go on with one more session, or stop, and the capacity so far."""
    capacity = 0
    for step in steps:
        if step.refused:
            return RampVerdict(False, capacity, step.refused)
        if step.p95_v2v_ms is None:
            return RampVerdict(False, capacity, "no_turns")
        if step.p95_v2v_ms > budget_ms:
            return RampVerdict(False, capacity, "budget")
        capacity = step.sessions
    if steps and steps[-1].sessions >= max_sessions:
        return RampVerdict(False, capacity, "max_sessions")
    return RampVerdict(True, capacity, None)
