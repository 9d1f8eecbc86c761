// The latency waterfall of one turn: one bar per critical-path stage, laid end to
// end on a shared millisecond axis (the stages are consecutive, so the bars add up
// to voice-to-voice), each drawn over a dashed box the size of its budget. The part
// of a bar past its budget is red. A last row shows the voice-to-voice total
// against its budget, whose line runs down the whole chart.
//
// Pure rendering: renderWaterfall(record, budgets) returns an <svg> element. The
// colours come from style.css (classes wf-*).

const SVG_NS = "http://www.w3.org/2000/svg";

/** Critical-path stages, in order (voice_pipeline/ledger/ledger.py CRITICAL_PATH). */
export const STAGES = [
  { key: "endpointing", label: "Endpointing", hint: "end of speech → end of turn decided" },
  { key: "asr_final", label: "ASR final", hint: "end of turn → final transcript" },
  { key: "llm_first_token", label: "LLM first token", hint: "final transcript → first LLM token" },
  { key: "first_clause", label: "First clause", hint: "first token → first clause complete" },
  { key: "tts_first_audio", label: "TTS first audio", hint: "first clause → its audio synthesized" },
  { key: "transport", label: "Transport", hint: "first audio → handed to the transport" },
];
/** A turn whose server-side tool ran before its first words (ledger.py TOOL_PATH):
 * these three replace first_clause, and still add up to voice-to-voice. */
export const TOOL_STAGES = [
  { key: "tool_call", label: "Tool call", hint: "first token → the LLM's calls written" },
  { key: "tool", label: "Tool", hint: "the calls start → all returned (the tools' own time)" },
  { key: "tool_answer", label: "Answer", hint: "results in → first clause of the answer" },
];

/** The critical-path stages of a record: with the tool stages if it has them. */
export function stagesOf(stagesMs) {
  if (stagesMs.tool == null) return STAGES;
  const i = STAGES.findIndex((s) => s.key === "first_clause");
  return [...STAGES.slice(0, i), ...TOOL_STAGES, ...STAGES.slice(i + 1)];
}
export const TOTAL = { key: "voice_to_voice", label: "Voice to voice", hint: "end of speech → first reply audio sent" };
export const BARGE_IN = { key: "barge_in_stop", label: "Barge-in stop", hint: "interrupting speech → reply flushed" };

/** `ready.budgets` may name stages with or without the `_ms` suffix. */
export function normalizeBudgets(raw) {
  const out = {};
  for (const [k, v] of Object.entries(raw || {})) {
    if (typeof v === "number") out[k.replace(/_ms$/, "")] = v;
  }
  return out;
}

/** Round up to 1, 2 or 5 times a power of ten. */
function niceStep(span, ticks) {
  const raw = span / ticks;
  const mag = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

export function fmtMs(ms) {
  if (ms == null || Number.isNaN(ms)) return "—";
  return ms >= 100 ? `${Math.round(ms)} ms` : `${ms.toFixed(ms >= 10 ? 0 : 1)} ms`;
}

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text != null) node.textContent = text;
  return node;
}

function titled(node, text) {
  node.appendChild(el("title", {}, text));
  return node;
}

let uid = 0;

/**
 * @param {object} record  turn.latency record (stages_ms, budgets_broken, ...)
 * @param {object} budgets stage -> ms (normalized)
 * @returns {SVGSVGElement}
 */
export function renderWaterfall(record, budgets) {
  const stagesMs = record.stages_ms || {};
  const broken = new Set((record.budgets_broken || []).map((b) => b.stage));
  const over = (key) => broken.has(key) || (budgets[key] != null && stagesMs[key] > budgets[key]);

  // Rows: each critical stage starts where the previous one ended.
  let t = 0;
  const rows = stagesOf(stagesMs).map((s) => {
    const ms = stagesMs[s.key];
    const row = { ...s, start: t, ms, budget: budgets[s.key], over: ms != null && over(s.key) };
    if (ms != null) t += ms;
    return row;
  });
  const total = stagesMs[TOTAL.key] ?? (rows.every((r) => r.ms != null) ? t : null);
  const totalBudget = budgets[TOTAL.key];
  const barge = stagesMs[BARGE_IN.key];

  let maxMs = Math.max(total ?? t, totalBudget ?? 0, 1);
  for (const r of rows) if (r.budget != null) maxMs = Math.max(maxMs, r.start + Math.max(r.ms ?? 0, r.budget));
  if (barge != null) maxMs = Math.max(maxMs, barge, budgets[BARGE_IN.key] ?? 0);
  const step = niceStep(maxMs, 5);
  const axisMax = Math.ceil((maxMs * 1.02) / step) * step;

  // Geometry (viewBox units; the SVG scales to its container's width).
  const W = 720;
  const labelW = 138;
  const valueW = 104;
  const x0 = labelW;
  const x1 = W - valueW;
  const rowH = 26;
  const barH = 14;
  const top = 24;
  const captionH = 20; // under the total row: where the interval starts and ends
  const yTotal = top + rows.length * rowH;
  const yBarge = yTotal + rowH + captionH;
  const H = (barge != null ? yBarge + rowH : yTotal + rowH + captionH) + 4;
  const x = (ms) => x0 + ((x1 - x0) * ms) / axisMax;

  const id = `wf${++uid}`;
  const svg = el("svg", {
    viewBox: `0 0 ${W} ${H}`,
    class: "wf",
    role: "img",
    "aria-label": `latency waterfall: voice to voice ${fmtMs(total)}`,
  });
  const defs = el("defs");
  const hatch = el("pattern", {
    id: `${id}-hatch`,
    patternUnits: "userSpaceOnUse",
    width: 6,
    height: 6,
    patternTransform: "rotate(45)",
  });
  hatch.appendChild(el("rect", { width: 6, height: 6, class: "wf-over" }));
  hatch.appendChild(el("line", { x1: 0, y1: 0, x2: 0, y2: 6, class: "wf-hatch-line" }));
  defs.appendChild(hatch);
  svg.appendChild(defs);

  // Axis: grid lines and labels along the top.
  const grid = el("g", { class: "wf-grid" });
  for (let v = 0; v <= axisMax + 1e-9; v += step) {
    const last = v + step > axisMax + 1e-9;
    grid.appendChild(el("line", { x1: x(v), x2: x(v), y1: top - 6, y2: yTotal + rowH }));
    grid.appendChild(el("text", { x: x(v), y: top - 10, class: "wf-tick" }, last ? `${v} ms` : `${v}`));
  }
  svg.appendChild(grid);

  const drawRow = (i, y, row, cls) => {
    const cy = y + rowH / 2;
    const g = el("g", { class: `wf-row ${cls}${row.over ? " is-over" : ""}`, "data-stage": row.key });
    if (i % 2 === 0) g.appendChild(el("rect", { x: 0, y, width: W, height: rowH, class: "wf-band" }));
    g.appendChild(titled(el("text", { x: 8, y: cy, class: "wf-label" }, row.label), row.hint));
    const by = cy - barH / 2;
    if (row.budget != null) {
      g.appendChild(
        titled(
          el("rect", {
            x: x(row.start),
            y: by - 2,
            width: Math.max(0, x(row.start + row.budget) - x(row.start)),
            height: barH + 4,
            rx: 3,
            class: "wf-budget",
          }),
          `${row.label} budget: ${fmtMs(row.budget)}`,
        ),
      );
    }
    if (row.ms != null) {
      const within = row.budget != null ? Math.min(row.ms, row.budget) : row.ms;
      const tip = `${row.label}: ${fmtMs(row.ms)}${row.budget != null ? ` (budget ${fmtMs(row.budget)})` : ""}`;
      g.appendChild(
        titled(
          el("rect", {
            x: x(row.start),
            y: by,
            width: Math.max(1.5, x(row.start + within) - x(row.start)),
            height: barH,
            rx: 2,
            class: "wf-bar",
          }),
          tip,
        ),
      );
      if (row.budget != null && row.ms > row.budget) {
        g.appendChild(
          titled(
            el("rect", {
              x: x(row.start + row.budget),
              y: by,
              width: Math.max(1.5, x(row.start + row.ms) - x(row.start + row.budget)),
              height: barH,
              rx: 2,
              fill: `url(#${id}-hatch)`,
              class: "wf-bar-over",
            }),
            `${fmtMs(row.ms - row.budget)} over budget`,
          ),
        );
      }
    }
    const value = el("text", { x: W - 8, y: cy, class: "wf-value" });
    value.appendChild(el("tspan", { class: "wf-ms" }, fmtMs(row.ms)));
    if (row.budget != null) value.appendChild(el("tspan", { class: "wf-of" }, ` / ${Math.round(row.budget)}`));
    g.appendChild(value);
    svg.appendChild(g);
  };

  rows.forEach((row, i) => drawRow(i, top + i * rowH, row, `wf-stage wf-${row.key}`));
  const totalRow = {
    ...TOTAL,
    start: 0,
    ms: total,
    budget: totalBudget,
    over: total != null && over(TOTAL.key),
  };
  svg.appendChild(el("line", { x1: 0, x2: W, y1: yTotal, y2: yTotal, class: "wf-sep" }));
  drawRow(rows.length, yTotal, totalRow, "wf-total");
  if (total != null) {
    const y = yTotal + rowH + 13;
    svg.appendChild(el("text", { x: x(0), y, class: "wf-caption", "text-anchor": "start" }, "↑ you stopped speaking"));
    svg.appendChild(el("text", { x: x(total), y, class: "wf-caption", "text-anchor": "end" }, "first reply audio ↑"));
  }
  if (barge != null) {
    const b = { ...BARGE_IN, start: 0, ms: barge, budget: budgets[BARGE_IN.key] };
    b.over = over(BARGE_IN.key);
    drawRow(0, yBarge, b, "wf-barge");
  }

  // The voice-to-voice budget as a line through every row.
  if (totalBudget != null) {
    const bx = x(totalBudget);
    svg.appendChild(
      titled(
        el("line", { x1: bx, x2: bx, y1: top - 4, y2: yTotal + rowH, class: "wf-limit" }),
        `voice-to-voice budget: ${fmtMs(totalBudget)}`,
      ),
    );
  }
  return svg;
}
