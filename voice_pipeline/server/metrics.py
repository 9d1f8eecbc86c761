"""Server metrics in the Prometheus text exposition format (0.0.4), written by hand.

Pure: the server calls the ``session_*`` methods and :meth:`ServerMetrics.observe`
with every session event; :meth:`ServerMetrics.render` is the body of ``/metrics``.
Stage latencies come from each finished turn's ``TurnRecord.stages_ms``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from voice_pipeline import events as ev
from voice_pipeline.ledger import STAGES

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "voice_pipeline"
#: seconds; spans a fast endpoint (tens of ms) to a slow voice-to-voice (seconds)
BUCKETS_S: tuple[float, ...] = (0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5, 0.8, 1.0, 1.5, 2.5, 5.0, 10.0)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


@dataclass(slots=True)
class Histogram:
    buckets: tuple[float, ...] = BUCKETS_S
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        for i, le in enumerate(self.buckets):
            if value <= le:
                self.counts[i] += 1
        self.total += value
        self.n += 1


@dataclass(slots=True)
class ServerMetrics:
    sessions_active: int = 0
    sessions_total: int = 0
    sessions_refused: dict[str, int] = field(default_factory=dict)
    turns: int = 0
    barge_ins: int = 0
    false_interruptions: int = 0
    turn_failures: int = 0
    budget_violations: dict[str, int] = field(default_factory=dict)
    stage_latency: dict[str, Histogram] = field(default_factory=lambda: {s.name: Histogram() for s in STAGES})

    def session_opened(self) -> None:
        self.sessions_active += 1
        self.sessions_total += 1

    def session_closed(self) -> None:
        self.sessions_active -= 1

    def session_refused(self, reason: str) -> None:
        self.sessions_refused[reason] = self.sessions_refused.get(reason, 0) + 1

    def observe(self, event: ev.Event) -> None:
        match event:
            case ev.TurnCompleted(record=record):
                self.turns += 1
                self.barge_ins += record.interrupted
                self.false_interruptions += record.false_interruptions
                for stage, ms in record.stages_ms.items():
                    self.stage_latency.setdefault(stage, Histogram()).observe(ms / 1000)
                for breach in record.budgets_broken:
                    self.budget_violations[breach.stage] = self.budget_violations.get(breach.stage, 0) + 1
            case ev.TurnFailed():
                self.turn_failures += 1
            case _:
                pass

    def render(self) -> str:
        out: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: Iterable[tuple[str, float]]) -> None:
            out.append(f"# HELP {PREFIX}_{name} {help_}")
            out.append(f"# TYPE {PREFIX}_{name} {kind}")
            out.extend(f"{PREFIX}_{name}{labels} {_num(v)}" for labels, v in samples)

        metric("sessions_active", "gauge", "Voice sessions connected now.", [("", self.sessions_active)])
        metric("sessions_total", "counter", "Voice sessions opened.", [("", self.sessions_total)])
        metric(
            "sessions_refused_total",
            "counter",
            "Connections refused, by reason.",
            [(f'{{reason="{_label(r)}"}}', n) for r, n in sorted(self.sessions_refused.items())],
        )
        metric("turns_total", "counter", "Turns finished.", [("", self.turns)])
        metric("barge_ins_total", "counter", "Replies interrupted by the user.", [("", self.barge_ins)])
        metric(
            "false_interruptions_total",
            "counter",
            "Replies paused by speech that was not an interruption (then resumed).",
            [("", self.false_interruptions)],
        )
        metric("turn_failures_total", "counter", "Turns in which a stage failed.", [("", self.turn_failures)])
        metric(
            "budget_violations_total",
            "counter",
            "Stages that broke their latency budget, by stage.",
            [(f'{{stage="{_label(s)}"}}', n) for s, n in sorted(self.budget_violations.items())],
        )
        name = f"{PREFIX}_stage_latency_seconds"
        out.append(f"# HELP {name} Per-stage latency of finished turns (the latency ledger's stages).")
        out.append(f"# TYPE {name} histogram")
        for stage, h in self.stage_latency.items():
            s = _label(stage)
            for le, count in zip(h.buckets, h.counts, strict=True):
                out.append(f'{name}_bucket{{stage="{s}",le="{_num(le)}"}} {count}')
            out.append(f'{name}_bucket{{stage="{s}",le="+Inf"}} {h.n}')
            out.append(f'{name}_sum{{stage="{s}"}} {_num(round(h.total, 6))}')
            out.append(f'{name}_count{{stage="{s}"}} {h.n}')
        return "\n".join(out) + "\n"
