"""Look at the traces ``voice-pipeline`` exports without a tracing backend.

``collect`` is a minimal OTLP/HTTP collector on loopback: it decodes every ``POST /v1/traces``
with the official ``opentelemetry-proto`` messages and, when stopped (Ctrl-C or SIGTERM),
writes the spans as JSON. ``render`` draws a waterfall of those spans as an SVG, one panel
per turn, the way a tracing UI shows a trace. docs/observability.md made its picture so::

    python tools/trace_waterfall.py collect --port 4318 --out spans.json &
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 voice-pipeline run --config text.yaml
    kill %1
    python tools/trace_waterfall.py render spans.json -o trace.svg

Needs the ``dev`` extra (opentelemetry-proto).
"""

from __future__ import annotations

import argparse
import html
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROW_H, NAME_W, BAR_W, DUR_W, PAD = 22, 250, 620, 90, 12
COLOURS = {
    "turn": "#4c72b0", "endpointing": "#8172b2", "asr_final": "#64b5cd", "llm_first_token": "#dd8452",
    "first_clause": "#ccb974", "tts_first_audio": "#55a868", "transport": "#937860",
    "barge_in": "#c44e52", "wasted_work": "#8c8c8c",
}  # fmt: skip


def collect(port: int, out: Path) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    spans: list[dict[str, Any]] = []
    lock = threading.Lock()

    def value(v: Any) -> Any:
        kind = v.WhichOneof("value")
        if kind == "array_value":
            return [value(x) for x in v.array_value.values]
        return getattr(v, kind) if kind else None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/v1/traces":
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                with lock:
                    for rs in req.resource_spans:
                        for ss in rs.scope_spans:
                            for s in ss.spans:
                                spans.append({
                                    "name": s.name, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                                    "parent_id": s.parent_span_id.hex(), "start_ns": s.start_time_unix_nano,
                                    "end_ns": s.end_time_unix_nano,
                                    "attributes": {a.key: value(a.value) for a in s.attributes},
                                })  # fmt: skip
                answer = ExportTraceServiceResponse().SerializeToString()
            else:  # metrics: taken, not kept
                answer = b""
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"collecting on http://127.0.0.1:{server.server_address[1]} (Ctrl-C writes {out})", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    server.server_close()
    with lock:
        out.write_text(json.dumps(spans, indent=1))
    print(f"wrote {len(spans)} spans to {out}", file=sys.stderr)


def _tree(
    spans: list[dict[str, Any]], root: dict[str, Any], depth: int = 0
) -> list[tuple[int, dict[str, Any]]]:
    kids = sorted(
        (s for s in spans if s["parent_id"] == root["span_id"]), key=lambda s: (s["start_ns"], s["name"])
    )
    return [(depth, root), *(row for k in kids for row in _tree(spans, k, depth + 1))]


def _label(span: dict[str, Any]) -> str:
    a = span["attributes"]
    if span["name"] == "turn":
        text = a.get("voice.content.user_text")
        said = f' "{text}"' if text else ""
        return f"turn {a.get('voice.turn.id')}{said}"
    return str(span["name"])


def render(spans: list[dict[str, Any]]) -> str:
    turns = sorted((s for s in spans if s["name"] == "turn"), key=lambda s: s["start_ns"])
    panels: list[str] = []
    y = PAD
    width = NAME_W + BAR_W + DUR_W + 2 * PAD
    for turn in turns:
        rows = _tree(spans, turn)
        t0, t1 = turn["start_ns"], max(s["end_ns"] for _, s in rows)
        scale = BAR_W / max(1, t1 - t0)
        a = turn["attributes"]
        v2v = a.get("voice.turn.voice_to_voice_ms")
        broken = ", ".join(a.get("voice.turn.budgets_broken") or []) or "none"
        head = f"voice_to_voice {v2v:.1f} ms · budgets broken: {broken}" if v2v is not None else "no reply"
        panels.append(
            f'<text x="{PAD}" y="{y + 14}" class="head">{html.escape(_label(turn))} — {head}</text>'
        )
        y += ROW_H + 4
        for depth, s in rows:
            x = NAME_W + PAD + (s["start_ns"] - t0) * scale
            w = max(1.5, (s["end_ns"] - s["start_ns"]) * scale)
            root = s["name"].split(".")[0]
            colour = COLOURS.get(root, "#999")
            ms = (s["end_ns"] - s["start_ns"]) / 1e6
            name = html.escape(_label(s) if depth else "turn")
            panels.append(
                f'<text x="{PAD + 12 * depth}" y="{y + 15}">{name}</text>'
                f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{ROW_H - 8}" fill="{colour}" rx="2"/>'
                f'<text x="{NAME_W + BAR_W + PAD + 8}" y="{y + 15}" class="ms">{ms:,.1f} ms</text>'
            )
            y += ROW_H
        y += PAD
    trace = turns[0]["trace_id"] if turns else "-"
    title = f'<text x="{PAD}" y="{y + 12}" class="foot">trace {trace} · {len(spans)} spans</text>'
    y += 24
    style = (
        "<style>text{font:13px sans-serif;fill:#222}.head{font-weight:bold}.ms{fill:#444}"
        ".foot{font-size:11px;fill:#666}</style>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" viewBox="0 0 {width} {y}">'
        f'{style}<rect width="100%" height="100%" fill="#fff"/>{"".join(panels)}{title}</svg>\n'
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="an OTLP/HTTP collector on 127.0.0.1 that writes the spans as JSON")
    c.add_argument("--port", type=int, default=4318)
    c.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("render", help="draw the spans' turns as an SVG waterfall")
    r.add_argument("spans", type=Path)
    r.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "collect":
        collect(args.port, args.out)
    else:
        args.output.write_text(render(json.loads(args.spans.read_text())))
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
