"""Human-readable rendering of the ledger's records (the CLI's per-turn table)."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from voice_pipeline.config import BudgetConfig
from voice_pipeline.ledger.ledger import ASKED_TOTAL, TOTAL, Mark, stages_of
from voice_pipeline.ledger.records import StageName


def _color(text: str, code: str) -> str:
    return f"\033[{code}m{text}\033[0m" if sys.stdout.isatty() else text


def format_turn(turn: Mapping[str, object], budget: BudgetConfig) -> str:
    stages = turn["stages_ms"]
    assert isinstance(stages, dict)
    lines = [
        f"turn {turn['turn_id']}",
        f"  user:      {turn['user_text'] or '(no words)'}",
        f"  assistant: {turn['assistant_text'] or '(no reply)'}",
    ]
    if turn.get("interrupted"):
        lines.append(f"  heard:     {turn['heard_text']}  [interrupted]")
    lines.append(f"  {'stage':<17}{'ms':>8}{'budget':>8}")
    # the stages of a turn whose tool ran first, of an asked reply, or of both (from the names)
    kinds = {Mark.TOOL_START: StageName.TOOL in stages, Mark.REPLY_ASKED: StageName.ASKED_TO_AUDIO in stages}
    for stage in stages_of({mark: 0 for mark, present in kinds.items() if present}):
        if stage.name not in stages:
            continue
        ms = float(stages[stage.name])
        limit = float(getattr(budget, stage.budget_key))
        over = ms > limit
        row = f"  {stage.name:<17}{ms:>8.0f}{limit:>8.0f}" + ("  OVER" if over else "")
        if stage in (TOTAL, ASKED_TOTAL):
            lines.append("  " + "-" * 33)
        lines.append(_color(row, "31") if over else row)
    return "\n".join(lines)


def format_summary(summary: Mapping[str, Mapping[str, float]]) -> str:
    if not summary:
        return "no turns"
    lines = [f"session summary  {'n':>4}{'p50':>8}{'p95':>8}{'p99':>8}{'budget':>8}"]
    for name, s in summary.items():
        lines.append(
            f"  {name:<15}{int(s['n']):>4}{s['p50']:>8.0f}{s['p95']:>8.0f}{s['p99']:>8.0f}{s['budget']:>8.0f}"
        )
    return "\n".join(lines)
