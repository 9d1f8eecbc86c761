"""The bench's HTML report: one self-contained file (inline CSS and SVG, no scripts,
no external assets) built from the JSON report (pure).

* latency versus sessions: p50/p95/p99 voice-to-voice at the client per step
  (the ramp's steps, or the one step) against the budget;
* a waterfall per turn: the ledger's critical-path stages laid end to end
  (from the turn's ``turn.latency`` record), the client's voice-to-voice as a
  tick, the budget as a dashed line, barge-in stop beside it.
"""

from __future__ import annotations

import html
import json
from typing import Any

from voice_pipeline.bench.text import machine_lines
from voice_pipeline.ledger.ledger import CRITICAL_PATH

COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948", "#76b7b2")
FONT = "font-family:system-ui,sans-serif;font-size:12px"


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _fmt(x: Any, unit: str = "") -> str:
    return "-" if x is None else f"{x:.0f}{unit}" if isinstance(x, float) else f"{x}{unit}"


def latency_plot(steps: list[dict[str, Any]], budget: float | None) -> str:
    """SVG: voice-to-voice percentiles (ms) against the number of sessions."""
    pts = [(s["sessions"], s["summary"]["client"].get("voice_to_voice")) for s in steps if not s["refused"]]
    pts = [(n, v) for n, v in pts if v]
    w, h, left, bottom, top, right = 560, 300, 56, 36, 16, 100
    if not pts:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="40">'
            '<text x="8" y="24">no turn measured</text></svg>'
        )
    xmax = float(max(int(n) for n, _ in pts) + 1)
    ymax = float(max([v["p99"] for _, v in pts] + [budget or 0])) * 1.15 or 1.0

    def x(n: float) -> float:
        return float(left + (w - left - right) * n / xmax)

    def y(ms: float) -> float:
        return h - bottom - (h - bottom - top) * ms / ymax

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" style="{FONT}" role="img" '
        'aria-label="voice-to-voice latency versus sessions">'
    ]
    out.append(f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#333"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#333"/>')
    for i in range(6):
        ms = ymax * i / 5
        out.append(f'<text x="{left - 6}" y="{y(ms) + 4:.1f}" text-anchor="end">{ms:.0f}</text>')
        out.append(f'<line x1="{left}" y1="{y(ms):.1f}" x2="{w - right}" y2="{y(ms):.1f}" stroke="#eee"/>')
    for n, _ in pts:
        out.append(f'<text x="{x(n):.1f}" y="{h - bottom + 16}" text-anchor="middle">{n}</text>')
    out.append(
        f'<text x="{(left + w - right) / 2}" y="{h - 4}" text-anchor="middle">concurrent sessions</text>'
    )
    if budget:
        out.append(
            f'<line x1="{left}" y1="{y(budget):.1f}" x2="{w - right}" y2="{y(budget):.1f}" '
            'stroke="#c00" stroke-dasharray="6 4"/>'
        )
        out.append(
            f'<text x="{w - right + 4}" y="{y(budget) + 4:.1f}" fill="#c00">budget {budget:.0f}</text>'
        )
    for i, key in enumerate(("p50", "p95", "p99")):
        color = COLORS[i]
        line = " ".join(f"{x(n):.1f},{y(v[key]):.1f}" for n, v in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="2"/>')
        for n, v in pts:
            out.append(
                f'<circle cx="{x(n):.1f}" cy="{y(v[key]):.1f}" r="3" fill="{color}">'
                f"<title>{n} session(s): {key} {v[key]:.0f} ms</title></circle>"
            )
        out.append(f'<text x="{w - right + 4}" y="{top + 14 + 14 * i}" fill="{color}">{key}</text>')
    out.append("</svg>")
    return "\n".join(out)


def waterfall(turns: list[dict[str, Any]], budget: float | None) -> str:
    """SVG: one row per turn, the ledger's critical-path stages end to end."""
    row, left, w, top, note_w = 18, 110, 900, 28, 190
    ends = [budget or 0.0]
    for t in turns:
        rec = t["records"][-1] if t["records"] else {}
        ends.append(sum(float(rec.get("stages_ms", {}).get(s.name, 0.0)) for s in CRITICAL_PATH))
        ends.append(float(t["voice_to_voice_ms"] or 0.0))
    scale = (w - left - note_w) / (max(ends) * 1.05 or 1.0)
    h = top + row * len(turns) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" style="{FONT}" role="img" '
        'aria-label="per-turn latency waterfall">'
    ]
    lx = float(left)
    for i, s in enumerate(CRITICAL_PATH):
        out.append(
            f'<rect x="{lx:.0f}" y="4" width="10" height="10" fill="{COLORS[i]}"/>'
            f'<text x="{lx + 14:.0f}" y="13">{_e(s.name)}</text>'
        )
        lx += 7 * len(s.name) + 30
    for i, t in enumerate(turns):
        yy = top + i * row
        label = f"s{t['session'] + 1} t{t['turn'] + 1}" + (" (cut)" if t["interrupt_planned"] else "")
        out.append(f'<text x="4" y="{yy + 12}">{_e(label)}</text>')
        rec = t["records"][-1] if t["records"] else {}
        stages = rec.get("stages_ms", {})
        x = float(left)
        for j, s in enumerate(CRITICAL_PATH):
            ms = stages.get(s.name)
            if ms is None:
                continue
            width = float(ms) * scale
            out.append(
                f'<rect x="{x:.1f}" y="{yy + 2}" width="{max(width, 0.5):.1f}" height="{row - 5}" '
                f'fill="{COLORS[j]}"><title>{_e(s.name)} {float(ms):.0f} ms</title></rect>'
            )
            x += width
        v2v = t["voice_to_voice_ms"]
        if v2v is not None:
            xv = left + v2v * scale
            out.append(
                f'<line x1="{xv:.1f}" y1="{yy}" x2="{xv:.1f}" y2="{yy + row - 2}" stroke="#000" '
                f'stroke-width="2"><title>client voice-to-voice {v2v:.0f} ms</title></line>'
            )
        note = [f"{v2v:.0f} ms" if v2v is not None else "no reply"]
        if t["barge_in_stop_ms"] is not None:
            note.append(f"barge-in stop {t['barge_in_stop_ms']:.0f} ms")
        out.append(f'<text x="{w - note_w + 10}" y="{yy + 12}">{_e(", ".join(note))}</text>')
    if budget:
        xb = left + budget * scale
        out.append(
            f'<line x1="{xb:.1f}" y1="{top - 4}" x2="{xb:.1f}" y2="{h - 30}" stroke="#c00" '
            'stroke-dasharray="6 4"/>'
        )
        out.append(
            f'<text x="{xb + 4:.1f}" y="{h - 18}" fill="#c00">voice-to-voice budget {budget:.0f} ms</text>'
        )
    out.append(
        f'<text x="{left}" y="{h - 4}">bars: server ledger stages; black tick: voice-to-voice at the '
        "client (wire)</text>"
    )
    out.append("</svg>")
    return "\n".join(out)


def _summary_table(summary: dict[str, Any]) -> str:
    rows = []
    for source in ("server", "client"):
        for name, s in summary.get(source, {}).items():
            rows.append(
                f"<tr><td>{_e(name)}</td><td>{source}</td><td>{s['n']}</td><td>{_fmt(s['p50'])}</td>"
                f"<td>{_fmt(s['p95'])}</td><td>{_fmt(s['p99'])}</td><td>{_fmt(s['budget'])}</td>"
                f"<td>{s['over_budget_share']:.0%}</td></tr>"
            )
    cols = ("stage", "source", "n", "p50", "p95", "p99", "budget", "over")
    head = "<tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def to_html(report: dict[str, Any]) -> str:
    budget = report["server"]["budgets"].get("voice_to_voice")
    steps = report["steps"]
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>voice-pipeline bench</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child{text-align:left}"
        ".warn{color:#a00}pre{background:#f6f6f6;padding:8px;overflow:auto}</style></head><body>",
        "<h1>voice-pipeline bench</h1>",
        *(f'<p class="machine">{_e(line)}</p>' for line in machine_lines(report.get("machine") or {})),
        f"<pre>{_e(json.dumps(report['config'], indent=1))}</pre>",
    ]
    parts += [f'<p class="warn">WARNING: {_e(w)}</p>' for w in report["warnings"]]
    ramp = report["ramp"]
    if ramp:
        parts.append(
            f"<p>ramp capacity: <b>{ramp['capacity_sessions']}</b> session(s); stopped by "
            f"{_e(ramp['stopped_by'])}</p>"
        )
    parts.append("<h2>Voice-to-voice (at the client, ms) versus sessions</h2>")
    parts.append(latency_plot(steps, ramp["budget_ms"] if ramp else budget))
    for step in steps:
        parts.append(f"<h2>{step['sessions']} session(s)</h2>")
        if step["refused"]:
            parts.append(f"<p>refused: {_e(step['refused'])}</p>")
            continue
        cpu = step["cpu"]
        cpu_text = (
            f"server CPU {cpu['utilisation']:.0%} of {cpu['cpu_count']:g} CPUs" if cpu else "no CPU figures"
        )
        parts.append(
            f"<p>{step['turns_completed']} turn(s) in {step['duration_s']} s, "
            f"{step['turns_per_s']} turns/s; {_e(cpu_text)}</p>"
        )
        parts.append(_summary_table(step["summary"]))
        parts.append("<h3>Per-turn waterfall</h3>")
        parts.append(waterfall(step["turn_results"], budget))
    parts.append("</body></html>")
    return "\n".join(parts)
