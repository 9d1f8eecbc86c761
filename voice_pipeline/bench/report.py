"""The bench's report as JSON (``voice-pipeline.bench/1``), and the warnings it carries (pure).

The same figures are printed by :mod:`voice_pipeline.bench.text` and drawn by
:mod:`voice_pipeline.bench.html`.

Figures per step (one step, or one per ramp size):

* ``client``: measured by the bench at the wire -- ``voice_to_voice`` (end of
  the caller's speech -> first voiced reply audio received) and
  ``barge_in_stop`` (onset of the interrupting speech -> nothing more of the
  reply can be heard).
* ``server``: the ledger's stages from each turn's ``turn.latency`` record
  (/ws only; Twilio's protocol carries none).
* ``cpu``: the server's process tree from ``/metrics`` scrapes.
* ``turn_taking``: of the utterances said with pauses inside (``--pauses``), the share
  the server cut into more than one turn (the premature end-of-turn rate), the ends of
  turn continuation undid, the reply audio heard while the speaker was still talking,
  and voice-to-voice of complete questions beside that of paused sentences.

``machine`` says what the figures ran on: the server's CPU (model, class -- AVX-512 BF16 /
AVX-512 / AVX2, emulated or not --, usable cores) and its machine-dependent settings (LLM
dtype, threads, KV block size, ASR threads) from its ``/healthz``, and the bench's own CPU.
"""

from __future__ import annotations

from typing import Any

from voice_pipeline.bench.run import BenchResult, StepResult, ramp_budget
from voice_pipeline.bench.stats import (
    CPU_WARN,
    OVER_BUDGET_SHARE,
    Summary,
    cpu_summary,
    labelled,
    metrics_delta,
    summarize,
)
from voice_pipeline.bench.tracker import TurnResult
from voice_pipeline.ledger.aggregate import percentile
from voice_pipeline.ledger.ledger import STAGES
from voice_pipeline.ledger.records import StageName

SCHEMA = "voice-pipeline.bench/1"
#: the bench's own microphone falling this far behind its schedule makes its figures suspect
MIC_LAG_WARN_S = 0.1


def client_summary(step: StepResult, budgets: dict[str, float]) -> dict[str, Summary]:
    out: dict[str, Summary] = {}
    v2v = summarize(step.v2v(), budgets.get("voice_to_voice"))
    stop = summarize(
        (t.barge_in_stop_ms for t in step.turns if t.barge_in_stop_ms is not None),
        budgets.get("barge_in_stop"),
    )
    for name, s in (("voice_to_voice", v2v), ("barge_in_stop", stop)):
        if s is not None:
            out[name] = s
    return out


def server_summary(step: StepResult, budgets: dict[str, float]) -> dict[str, Summary]:
    records = [rec for t in step.turns for rec in t.records]
    out: dict[str, Summary] = {}
    for stage in STAGES:
        values = [r.stages_ms[stage.name] for r in records if stage.name in r.stages_ms]
        s = summarize(values, budgets.get(stage.name))
        if s is not None:
            out[stage.name] = s
    return out


def turn_taking_summary(step: StepResult, budgets: dict[str, float]) -> dict[str, Any] | None:
    """How the server took turns: premature ends of turn, continuations (None: no turns)."""
    turns = [t for t in step.turns if t.error is None]
    if not turns:
        return None
    paused = [t for t in turns if t.paused]
    judged = [t for t in paused if t.premature_end is not None]
    early = sum(bool(t.premature_end) for t in judged)
    questions = [t for t in turns if not t.paused and not t.interrupts_previous]

    def v2v(ts: list[TurnResult]) -> dict[str, Any] | None:
        s = summarize(
            (t.voice_to_voice_ms for t in ts if t.voice_to_voice_ms is not None),
            budgets.get("voice_to_voice"),
        )
        return None if s is None else s.as_dict()

    over = summarize(t.talked_over_s * 1000 for t in paused)
    rules: dict[str, int] = {}
    for t in turns:
        for rec in t.records:
            if rec.end_of_turn is not None and rec.end_of_turn.rule:
                rules[rec.end_of_turn.rule] = rules.get(rec.end_of_turn.rule, 0) + 1
    return {
        "paused_turns": len(paused),
        "premature_end_rate": round(early / len(judged), 3) if judged else None,
        "premature_ends": early,
        "continued": sum(t.continued for t in turns),
        "talked_over_ms": None
        if over is None
        else {"p50": round(over.p50, 1), "max": round(max(t.talked_over_s for t in paused) * 1000, 1)},
        "voice_to_voice_complete": v2v(questions),
        "voice_to_voice_paused": v2v(paused),
        "end_of_turn_rules": rules,
    }


def pipeline_summary(step: StepResult) -> dict[str, Any] | None:
    """From the ledger records (/ws): how much of voice_to_voice was model compute on the
    critical path and how much the pipeline itself added (``critical_path`` of each
    record), and the share of turns that broke any budget."""
    records = [rec for t in step.turns for rec in t.records if "voice_to_voice" in rec.stages_ms]
    if not records:
        return None
    v2v = [r.stages_ms[StageName.VOICE_TO_VOICE] for r in records]
    out: dict[str, Any] = {
        "turns": len(records),
        "turns_over_budget_share": round(sum(bool(r.budgets_broken) for r in records) / len(records), 3),
    }
    # (overhead, compute, voice_to_voice) of the records that have a critical path
    measured = [
        (r.overhead_ms, r.compute_ms, total)
        for r, total in zip(records, v2v, strict=True)
        if r.overhead_ms is not None
    ]
    if measured:
        overhead = [over for over, _, _ in measured]
        total_v2v = sum(total for _, _, total in measured)
        out["overhead_ms"] = summarize(overhead).as_dict()  # type: ignore[union-attr]  # not empty
        out["overhead_share"] = round(sum(overhead) / total_v2v, 3) if total_v2v else None
        names = sorted({k for _, compute, _ in measured for k in compute})
        out["compute_ms_p50"] = {
            k: round(percentile([compute.get(k, 0.0) for _, compute, _ in measured], 50), 1) for k in names
        }
    out["voice_to_voice_p50"] = round(percentile(v2v, 50), 1)
    return out


def over_budget(step: StepResult, budgets: dict[str, float]) -> list[dict[str, Any]]:
    """Stages over budget in more than OVER_BUDGET_SHARE of the turns that measured them."""
    rows = []
    for source, summ in (
        ("client", client_summary(step, budgets)),
        ("server", server_summary(step, budgets)),
    ):
        for name, s in summ.items():
            if s.over_share > OVER_BUDGET_SHARE:
                rows.append({"source": source, "stage": name, "share": round(s.over_share, 3), "n": s.n})
    if not any(r["source"] == "server" for r in rows) and len(step.scrapes) >= 2:
        # no ledger records (Twilio): the server's own counters over the step
        delta = metrics_delta(step.scrapes[0].metrics, step.scrapes[-1].metrics)
        turns = delta.get("voice_pipeline_turns_total", 0.0)
        for stage, n in labelled(delta, "voice_pipeline_budget_violations_total", "stage").items():
            if turns and n / turns > OVER_BUDGET_SHARE:
                rows.append(
                    {"source": "server_metrics", "stage": stage, "share": round(n / turns, 3), "n": turns}
                )
    return rows


def step_json(step: StepResult, budgets: dict[str, float]) -> dict[str, Any]:
    done = [t for t in step.turns if t.error is None]
    cpu = cpu_summary(step.scrapes)
    metrics: dict[str, Any] | None = None
    if len(step.scrapes) >= 2:
        end = step.scrapes[-1].metrics
        metrics = {
            "scrapes": len(step.scrapes),
            "delta": metrics_delta(step.scrapes[0].metrics, end),
            "stage_over_budget_ratio": labelled(end, "voice_pipeline_stage_over_budget_ratio", "stage"),
            "timeline": [
                {
                    "t_s": round(s.t - step.scrapes[0].t, 2),
                    **{k: v for k, v in s.metrics.items() if k.startswith("process_")},
                }
                for s in step.scrapes
            ],
        }
    return {
        "sessions": step.sessions,
        "refused": step.refused,
        "duration_s": round(step.duration_s, 2),
        "turns": len(step.turns),
        "turns_completed": len(done),
        "turns_per_s": round(len(done) / step.duration_s, 3) if step.duration_s else None,
        "interrupts_planned": step.interrupts_planned,
        "interrupts_done": sum(t.interrupt_planned and t.interrupt_skipped is None for t in step.turns),
        "summary": {
            "client": {k: s.as_dict() for k, s in client_summary(step, budgets).items()},
            "server": {k: s.as_dict() for k, s in server_summary(step, budgets).items()},
            "pipeline": pipeline_summary(step),
            "turn_taking": turn_taking_summary(step, budgets),
        },
        "over_budget": over_budget(step, budgets),
        "cpu": cpu.as_dict() if cpu else None,
        "bench": {
            "cpu_s": round(step.bench_cpu_s, 2),
            "utilisation_of_one_cpu": round(step.bench_cpu_s / step.duration_s, 3)
            if step.duration_s
            else None,
            "max_mic_lag_ms": round(step.max_mic_lag_s * 1000, 1),
            "host_cpu_busy": None if step.host_cpu_busy is None else round(step.host_cpu_busy, 3),
        },
        "server_metrics": metrics,
        "turn_results": [t.as_dict() for t in step.turns],
    }


def machine_json(result: BenchResult) -> dict[str, Any]:
    server = (result.health or {}).get("machine")
    return {"server": server if isinstance(server, dict) else None, "bench": result.bench_machine}


def warnings(result: BenchResult) -> list[str]:
    out = list(result.warnings)
    for step in result.steps:
        at = f" at {step.sessions} session(s)" if len(result.steps) > 1 else ""
        cpu = cpu_summary(step.scrapes)
        if cpu is not None and cpu.utilisation > CPU_WARN:
            out.append(
                f"server CPU utilisation {cpu.utilisation:.0%}{at} is past {CPU_WARN:.0%}: "
                "queueing makes latency climb steeply from here"
            )
        elif cpu is not None and cpu.peak > CPU_WARN:
            out.append(f"server CPU utilisation peaked at {cpu.peak:.0%}{at} (average {cpu.utilisation:.0%})")
        if step.max_mic_lag_s > MIC_LAG_WARN_S:
            out.append(
                f"the bench's microphone fell up to {step.max_mic_lag_s * 1000:.0f} ms behind real time{at} "
                "(a busy machine?): the late frames went out in a burst; the figures count from when "
                "they were sent, but the pacing was not a live caller's"
            )
        failed = [t for t in step.turns if t.error]
        if failed:
            out.append(
                f"{len(failed)} turn(s) failed{at}, e.g. session {failed[0].session + 1} turn "
                f"{failed[0].index + 1}: {failed[0].error}"
            )
        skipped = [t for t in step.turns if t.interrupt_skipped]
        if skipped:
            out.append(f"{len(skipped)} planned interruption(s) skipped{at}: {skipped[0].interrupt_skipped}")
    if result.steps and all(cpu_summary(s.scrapes) is None for s in result.steps if not s.refused):
        out.append(
            "no CPU figures: the server's /metrics is not reachable from here (a load balancer?) "
            "or has no process metrics"
        )
    if result.options.protocol == "twilio":
        out.append(
            "Twilio's protocol carries no latency records: no per-stage breakdown, only the "
            "client's figures (and the server's /metrics counters)"
        )
    return out


def ramp_json(result: BenchResult) -> dict[str, Any] | None:
    if not result.options.ramp:
        return None
    v = result.verdict
    return {
        "capacity_sessions": v.capacity if v else 0,
        "stopped_by": v.stopped_by if v else None,
        "server_max_sessions": (result.health or {}).get("max_sessions"),
        "budget_ms": ramp_budget(result),
        "steps": [ramp_row(s, result.budgets) for s in result.steps],
    }


def ramp_row(step: StepResult, budgets: dict[str, float]) -> dict[str, Any]:
    s = summarize(step.v2v(), budgets.get("voice_to_voice"))
    cpu = cpu_summary(step.scrapes)
    return {
        "sessions": step.sessions,
        "refused": step.refused,
        "turns": len(step.v2v()),
        "p50_ms": round(s.p50, 1) if s else None,
        "p95_ms": round(s.p95, 1) if s else None,
        "p99_ms": round(s.p99, 1) if s else None,
        "cpu_utilisation": round(cpu.utilisation, 3) if cpu else None,
    }


def to_json(result: BenchResult) -> dict[str, Any]:
    steps = [step_json(s, result.budgets) for s in result.steps]
    measured = [s for s in steps if not s["refused"]]
    return {
        "schema": SCHEMA,
        "config": {**result.options.as_dict(), "speech": result.speech},
        "server": {"health": result.health, "budgets": result.budgets, "budget_source": result.budget_source},
        "machine": machine_json(result),
        "summary": measured[-1]["summary"] if measured else None,
        "ramp": ramp_json(result),
        "steps": steps,
        "warnings": warnings(result),
    }
