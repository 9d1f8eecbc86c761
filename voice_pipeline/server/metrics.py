"""Server metrics in the Prometheus text exposition format (0.0.4), written by hand.

The server calls the ``session_*`` methods and :meth:`ServerMetrics.observe`
with every session event; :meth:`ServerMetrics.render` is the body of ``/metrics``.
Stage latencies come from each finished turn's ``TurnRecord.stages_ms``; the
share of each stage's last :data:`BUDGET_WINDOW_TURNS` measurements that broke
its budget is a gauge, so a stage persistently over budget under load shows.

Process metrics (``process_cpu_seconds_total``, ``process_resident_memory_bytes``,
``voice_pipeline_cpu_count``) cover the server process *and its descendants*
(an engine may run in a spawned child, e.g. vLLM's engine core): they come from
:class:`ProcessTree`, which reads ``/proc`` (psutil, if installed, off Linux;
nothing at all without either). Everything else here is pure.
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from voice_pipeline import events as ev
from voice_pipeline.ledger.ledger import STAGES

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


#: the over-budget share of a stage is taken over its last this many measurements
BUDGET_WINDOW_TURNS = 50


@dataclass(frozen=True, slots=True)
class ProcessStats:
    """CPU and memory of the server's process tree (itself + live descendants)."""

    cpu_seconds: float  # user + system, monotonic (descendants that exited keep counting)
    resident_bytes: int  # sum of RSS (pages shared between processes count in each)
    processes: int
    cpu_count: float  # CPUs this process may use (affinity, capped by a cgroup quota)


def cpu_count() -> float:
    """CPUs available to this process: the affinity mask, capped by a cgroup v2 ``cpu.max``."""
    try:
        n: float = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        n = float(os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max" and float(period) > 0:
            n = min(n, float(quota) / float(period))
    except (OSError, ValueError):
        pass
    return n


def parse_proc_stat(text: str) -> tuple[int, int, int]:
    """``/proc/PID/stat`` -> (ppid, utime + stime in clock ticks, rss in pages)."""
    rest = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    # rest[0] is field 3 (state): ppid = field 4, utime/stime = 14/15, rss = 24
    return int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[21])


class ProcessTree:
    """Reads the CPU time and RSS of process ``pid`` and all its descendants.

    CPU time stays monotonic: a descendant's last reading is kept after it exits
    (children reaped by us are not also counted through ``cutime``).
    """

    def __init__(self, pid: int | None = None, proc: Path = Path("/proc")) -> None:
        self.pid = os.getpid() if pid is None else pid
        self._proc = proc
        self._seen: dict[tuple[int, str], float] = {}  # (pid, start time) -> cpu seconds
        self._gone = 0.0
        self._tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._page = int(os.sysconf("SC_PAGE_SIZE")) if hasattr(os, "sysconf") else 4096

    def read(self) -> ProcessStats | None:
        if self._proc.is_dir():
            return self._read_proc()
        return _read_psutil(self.pid)

    def _read_proc(self) -> ProcessStats | None:
        table: dict[int, tuple[int, int, int, str]] = {}
        for entry in self._proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                text = (entry / "stat").read_text()
                ppid, ticks, rss = parse_proc_stat(text)
            except (OSError, ValueError, IndexError):
                continue  # exited meanwhile, or not readable
            start = text[text.rindex(")") + 2 :].split()[19]  # field 22: start time
            table[int(entry.name)] = (ppid, ticks, rss, start)
        if self.pid not in table:
            return None
        children: dict[int, list[int]] = {}
        for pid, (ppid, *_) in table.items():
            children.setdefault(ppid, []).append(pid)
        tree, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, ()))
        live: dict[tuple[int, str], float] = {}
        rss = 0
        for pid in tree:
            _, ticks, pages, start = table[pid]
            live[(pid, start)] = ticks / self._tick
            rss += pages * self._page
        self._gone += sum(v for k, v in self._seen.items() if k not in live)
        self._seen = {k: max(v, self._seen.get(k, 0.0)) for k, v in live.items()}
        cpu = self._gone + sum(self._seen.values())
        return ProcessStats(cpu, rss, len(tree), cpu_count())


def _read_psutil(pid: int) -> ProcessStats | None:
    """Off Linux: psutil if it is installed (a dev dependency only), else nothing."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
        cpu = rss = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                cpu += t.user + t.system
                rss += p.memory_info().rss
            except psutil.Error:
                continue
    except psutil.Error:
        return None
    return ProcessStats(cpu, int(rss), len(procs), cpu_count())


@dataclass(slots=True)
class ServerMetrics:
    sessions_active: int = 0
    sessions_total: int = 0
    sessions_refused: dict[str, int] = field(default_factory=dict)
    #: sessions opened per route ("ws", "realtime", "twilio")
    sessions_by_endpoint: dict[str, int] = field(default_factory=dict)
    turns: int = 0
    barge_ins: int = 0
    false_interruptions: int = 0
    turn_failures: int = 0
    #: user turns ended, by the end-of-turn rule that ended them (vad.end_of_turn.Rule)
    end_of_turn: dict[str, int] = field(default_factory=dict)
    #: ends of turn undone because the user went on before hearing the reply
    continuations: int = 0
    #: ... by the rule that had ended the turn (counted when the turn completes)
    ends_undone: dict[str, int] = field(default_factory=dict)
    budget_violations: dict[str, int] = field(default_factory=dict)
    stage_latency: dict[str, Histogram] = field(default_factory=lambda: {s.name: Histogram() for s in STAGES})
    #: per stage: over budget or not, for its last ``budget_window`` measurements
    budget_window: int = BUDGET_WINDOW_TURNS
    over_budget: dict[str, deque[bool]] = field(default_factory=dict)
    #: CPU/memory of the server's process tree at render time (None = not available here)
    process_stats: Callable[[], ProcessStats | None] = field(default_factory=lambda: ProcessTree().read)

    def session_opened(self) -> None:
        self.sessions_active += 1
        self.sessions_total += 1

    def endpoint_opened(self, endpoint: str) -> None:
        """A session opened on this edge ("ws", "realtime", "twilio", "audiosocket")."""
        self.sessions_by_endpoint[endpoint] = self.sessions_by_endpoint.get(endpoint, 0) + 1

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
                if record.end_of_turn is not None:
                    rule = record.end_of_turn.rule
                    self.end_of_turn[rule] = self.end_of_turn.get(rule, 0) + 1
                for undone in record.undone_ends:
                    self.ends_undone[undone.rule] = self.ends_undone.get(undone.rule, 0) + 1
                for stage, ms in record.stages_ms.items():
                    self.stage_latency.setdefault(stage, Histogram()).observe(ms / 1000)
                for breach in record.budgets_broken:
                    self.budget_violations[breach.stage] = self.budget_violations.get(breach.stage, 0) + 1
                broken = {b.stage for b in record.budgets_broken}
                for stage in record.stages_ms:
                    window = self.over_budget.setdefault(stage, deque(maxlen=self.budget_window))
                    window.append(stage in broken)
            case ev.TurnFailed():
                self.turn_failures += 1
            case ev.TurnContinued():
                self.continuations += 1
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
            "endpoint_sessions_total",
            "counter",
            "Voice sessions opened, by route (ws, realtime, twilio).",
            [(f'{{endpoint="{_label(e)}"}}', n) for e, n in sorted(self.sessions_by_endpoint.items())],
        )
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
            "end_of_turn_total",
            "counter",
            "User turns ended, by the rule that ended them (complete, unsure, no_verdict, incomplete, "
            "silence, max_turn, push_to_talk).",
            [(f'{{rule="{_label(r)}"}}', n) for r, n in sorted(self.end_of_turn.items())],
        )
        metric(
            "continuations_total",
            "counter",
            "Ends of turn undone: the user went on speaking before hearing the reply.",
            [("", self.continuations)],
        )
        metric(
            "ends_undone_total",
            "counter",
            "Ends of turn the user undid by going on, by the rule that had ended the turn: "
            "which rule ends turns too soon (counted when the turn completes).",
            [(f'{{rule="{_label(r)}"}}', n) for r, n in sorted(self.ends_undone.items())],
        )
        metric(
            "budget_violations_total",
            "counter",
            "Stages that broke their latency budget, by stage.",
            [(f'{{stage="{_label(s)}"}}', n) for s, n in sorted(self.budget_violations.items())],
        )
        metric(
            "stage_over_budget_ratio",
            "gauge",
            f"Share of the stage's last {self.budget_window} measurements (finished turns) that "
            "broke its budget.",
            [(f'{{stage="{_label(s)}"}}', sum(w) / len(w)) for s, w in sorted(self.over_budget.items()) if w],
        )
        metric(
            "stage_over_budget_window_turns",
            "gauge",
            "Measurements the over-budget ratio is taken over (at most the window).",
            [(f'{{stage="{_label(s)}"}}', len(w)) for s, w in sorted(self.over_budget.items()) if w],
        )
        self._render_process(out)
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

    def _render_process(self, out: list[str]) -> None:
        stats = self.process_stats()
        if stats is None:
            return
        rows = (
            (
                "process_cpu_seconds_total",
                "counter",
                "User and system CPU time of the server process and its descendants, in seconds.",
                round(stats.cpu_seconds, 3),
            ),
            (
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory of the server process and its descendants (shared pages count in each).",
                stats.resident_bytes,
            ),
            (f"{PREFIX}_processes", "gauge", "Processes in the server's process tree.", stats.processes),
            (
                f"{PREFIX}_cpu_count",
                "gauge",
                "CPUs the server may use (affinity, cgroup quota).",
                stats.cpu_count,
            ),
        )
        for name, kind, help_, value in rows:
            out.extend((f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {_num(value)}"))
