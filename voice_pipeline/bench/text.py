"""The bench's report as text (pure): the summary ``voice-pipeline bench`` prints at the
end of a run (per step: the stages' percentiles against their budgets, CPU, turn-taking;
the ramp and its capacity; warnings), the machine lines (shared with the HTML report), and
the progress line printed per finished turn.

The figures come from :mod:`voice_pipeline.bench.report` (the JSON report), so the text
says what the JSON holds.
"""

from __future__ import annotations

import math
from typing import Any

from voice_pipeline.bench.report import (
    client_summary,
    machine_json,
    ramp_json,
    server_summary,
    step_json,
    warnings,
)
from voice_pipeline.bench.run import BenchResult, StepResult
from voice_pipeline.bench.stats import OVER_BUDGET_SHARE, Summary, cpu_summary
from voice_pipeline.bench.tracker import TurnResult
from voice_pipeline.ledger.ledger import CRITICAL_PATH
from voice_pipeline.ledger.records import StageName

CLIENT_STAGES = ("voice_to_voice", "barge_in_stop")


def machine_lines(machine: dict[str, Any]) -> list[str]:
    """``server: AVX2, 2 cores (AMD EPYC); float32, 1 LLM thread, ...`` (and the bench's CPU)."""
    server, bench = machine.get("server"), machine.get("bench")
    if server is None:
        lines = ["server machine: not reported (no machine in its /healthz: an older server, or a proxy)"]
    else:
        cpu = server.get("cpu") or {}
        if server.get("llm_engine") == "vllm":
            llm = (
                f"LLM {server.get('llm_dtype')}, {server.get('llm_threads')} thread(s), "
                f"KV blocks of {server.get('kv_block_tokens')} tokens"
            )
        else:
            llm = f"LLM on a {server.get('llm_engine')} server"
        asr = f"ASR {server.get('asr_threads')} thread(s)"
        if server.get("asr_workers") is not None:  # an older server does not say
            asr += f", {server.get('asr_workers')} decode(s) at once"
        lines = [f"server machine: {cpu.get('label')}; {llm}; {asr}"]
        floors = server.get("floors")
        if isinstance(floors, dict):
            llm_floor = floors.get("llm") or {}
            pre, dec = llm_floor.get("prefill_ms_per_token"), llm_floor.get("decode_ms_per_token")
            link = (
                f"; LLM link >= {pre:.2f} ms per prompt token to prefill, >= {dec:.1f} ms per generated token"
                if isinstance(pre, float) and isinstance(dec, float)
                else ""
            )
            lines.append(
                f"server floors: memory {floors.get('copy_gb_s')} GB/s, matmul {floors.get('matmul_gflops')} "
                f"GFLOPS ({floors.get('matmul_dtype')}){link}"
            )
    if bench is not None and (server is None or bench.get("label") != (server.get("cpu") or {}).get("label")):
        lines.append(f"bench machine: {bench.get('label')}")
    return lines


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0f}"


def _table(rows: list[tuple[str, Summary]]) -> list[str]:
    lines = [f"  {'stage':<32}{'n':>4}{'p50':>7}{'p95':>7}{'p99':>7}{'budget':>8}{'over':>6}"]
    for name, s in rows:
        budget = f"{s.budget:.0f}" if s.budget is not None else "-"
        lines.append(
            f"  {name:<32}{s.n:>4}{_ms(s.p50):>7}{_ms(s.p95):>7}{_ms(s.p99):>7}{budget:>8}"
            f"{s.over_share:>6.0%}"
        )
    return lines


def format_step(step: StepResult, budgets: dict[str, float]) -> list[str]:
    if step.refused:
        return [f"{step.sessions} session(s): refused: {step.refused}"]
    data = step_json(step, budgets)
    lines = [
        f"{step.sessions} session(s): {data['turns_completed']} turn(s) in {step.duration_s:.1f} s = "
        f"{data['turns_per_s']} turns/s; {data['interrupts_done']} of {step.interrupts_planned} planned "
        "interruption(s) done"
    ]
    server = server_summary(step, budgets)
    rows = [(f"{s.name}", server[s.name]) for s in CRITICAL_PATH if s.name in server]
    rows += [(f"{n} (server ledger)", server[n]) for n in CLIENT_STAGES if n in server]
    client = client_summary(step, budgets)
    rows += [(f"{n} (client, wire)", client[n]) for n in CLIENT_STAGES if n in client]
    lines += _table(rows) if rows else ["  no turn measured"]
    cpu = cpu_summary(step.scrapes)
    if cpu is not None:
        per = (cpu.rss_peak - cpu.rss_before) / step.sessions / 2**20
        lines.append(
            f"  server CPU {cpu.utilisation:.0%} of {cpu.cpu_count:g} CPUs (peak {cpu.peak:.0%}); "
            f"RSS {cpu.rss_before / 2**30:.2f} -> peak {cpu.rss_peak / 2**30:.2f} GiB "
            f"({per:+.0f} MiB/session)"
        )
    bench = data["bench"]
    if step.host_cpu_busy is not None:
        lines.append(
            f"  the bench's machine was {step.host_cpu_busy:.0%} busy (every process on it; the server's "
            "share is above when it runs here)"
        )
    lines.append(
        f"  bench CPU {bench['utilisation_of_one_cpu']:.0%} of one CPU; its microphone lagged "
        f"{bench['max_mic_lag_ms']} ms at most"
    )
    pipe = data["summary"]["pipeline"]
    if pipe is not None and "overhead_ms" in pipe:
        spans = ", ".join(f"{k} {v:.0f}" for k, v in pipe["compute_ms_p50"].items())
        lines.append(
            f"  pipeline overhead p50 {pipe['overhead_ms']['p50']:.0f} ms, {pipe['overhead_share']:.1%} of "
            f"voice-to-voice (model compute on the path, p50 ms: {spans})"
        )
    if pipe is not None:
        lines.append(f"  turns that broke any budget: {pipe['turns_over_budget_share']:.0%}")
    tt = data["summary"]["turn_taking"]
    if tt is not None and tt["paused_turns"]:
        rate = "n/a (no turn ids)" if tt["premature_end_rate"] is None else f"{tt['premature_end_rate']:.0%}"
        over = tt["talked_over_ms"]
        lines.append(
            f"  turn-taking: {tt['paused_turns']} sentence(s) said with pauses: premature end of turn {rate} "
            f"({tt['premature_ends']} cut into several turns); {tt['continued']} end(s) of turn undone by "
            f"continuation; reply audio heard while still speaking p50 {over['p50']:.0f} ms, "
            f"max {over['max']:.0f} ms"
        )
        for name, key in (
            ("complete questions", "voice_to_voice_complete"),
            ("paused sentences", "voice_to_voice_paused"),
        ):
            v = tt[key]
            if v is not None:
                lines.append(
                    f"  voice-to-voice of {name}: p50 {v['p50']:.0f} ms, p95 {v['p95']:.0f} ms (n={v['n']})"
                )
    over = data["over_budget"]
    if over:
        listed = ", ".join(f"{r['stage']} {r['share']:.0%} ({r['source']})" for r in over)
        lines.append(f"  over budget in > {OVER_BUDGET_SHARE:.0%} of turns: {listed}")
    return lines


def format_text(result: BenchResult) -> str:
    o = result.options
    head = (
        f"voice-pipeline bench: {o.protocol} {o.url}, {o.turns} turn(s) per session, seed {o.seed}, "
        f"budgets from {result.budget_source}"
    )
    lines = [head, *machine_lines(machine_json(result))]
    for step in result.steps:
        lines += format_step(step, result.budgets)
    ramp = ramp_json(result)
    if ramp is not None:
        lines.append(f"ramp (p95 voice-to-voice at the client vs its budget {ramp['budget_ms']:.0f} ms):")
        for row in ramp["steps"]:
            p95 = "refused" if row["refused"] else f"p95 {row['p95_ms']} ms"
            lines.append(f"  {row['sessions']:>3} session(s): {p95}")
        why = {
            "budget": "p95 voice-to-voice broke its budget",
            "server_limit": f"the server's max_sessions limit ({ramp['server_max_sessions']}) stopped "
            "the ramp; raise `serve --max-sessions` to probe further",
            "rate_limit": "the server's per-address rate limit of new sessions refused a session (HTTP 429)",
            "max_sessions": f"--max-sessions {o.max_sessions} reached",
            "no_turns": "a step measured no turn",
        }.get(ramp["stopped_by"] or "", "")
        lines.append(f"capacity: {ramp['capacity_sessions']} session(s) ({why})")
    for w in warnings(result):
        lines.append(f"WARNING: {w}")
    return "\n".join(lines)


def format_turn(turn: TurnResult) -> str:
    """One progress line (stderr) per finished turn."""
    parts = [f"session {turn.session + 1} turn {turn.index + 1}:"]
    if turn.voice_to_voice_ms is not None:
        parts.append(f"voice-to-voice {turn.voice_to_voice_ms:.0f} ms")
    rec = turn.record
    if rec and "voice_to_voice" in rec.stages_ms:
        parts.append(f"(server {rec.stages_ms[StageName.VOICE_TO_VOICE]:.0f} ms)")
    if turn.barge_in_stop_ms is not None:
        parts.append(f"barge-in stop {turn.barge_in_stop_ms:.0f} ms")
    if turn.premature_end:
        parts.append(f"ENDED EARLY: {len(turn.server_turn_ids)} server turns")
    elif turn.continued:
        parts.append(f"(continued {turn.continued}x)")
    if turn.error:
        parts.append(f"FAILED: {turn.error}")
    parts.append(repr(turn.text))
    return " ".join(parts)
