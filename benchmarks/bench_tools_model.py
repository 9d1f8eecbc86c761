"""What the tool-calling LLM (Qwen2.5-Coder-0.5B-Instruct) costs on CPU, beside SmolLM2-135M.

    .venv/bin/voice-pipeline models --tools-model      # once
    .venv/bin/python benchmarks/bench_tools_model.py [--reps 5] [--json out.json]

Each model gets a fresh process running the in-process vLLM engine (``VLLMEngine``) with the
default config and the settings chosen for the machine (dtype auto, 1 OpenMP thread on 2
cores). Measured in it: engine load time; RSS of the process tree once loaded (vLLM's engine
core runs in a child process); the first token of a question whose system prompt is already
in the prefix cache (the warm prefix of a turn); ms per generated token over a longer reply;
and, for the tool model, a tool-worthy question with a ``get_weather`` tool offered through
the chat template (first token, tokens written, and the text). Medians; asserts nothing.

The tool prompt is the model's chat template rendered with ``tools=[...]``: its system part
(the tool list and the call format) is passed as the system message, which the template
renders to the same prompt (``voice_pipeline.tools_model.tools_system_message`` checks it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUESTIONS = [
    "What is the capital of France?",
    "How many days are there in a week?",
    "What color is the sky on a clear day?",
    "What do bees make?",
    "How many legs does a spider have?",
    "Which animal says moo?",
]
CITIES = ["Paris", "Berlin", "Tokyo", "Madrid", "Oslo", "Lima"]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city name"}},
            "required": ["city"],
        },
    },
}


def _tree_rss_mib() -> float:
    import psutil

    me = psutil.Process()
    return float(sum(p.memory_info().rss for p in [me, *me.children(recursive=True)])) / 2**20


async def _run(llm: Any, messages: list[Any], rid: str) -> tuple[float, float | None, int, str]:
    """(first token ms, ms per token after the first, tokens, text)."""
    t0 = time.perf_counter()
    first: float | None = None
    last = t0
    tokens = 0
    text = ""
    async for delta in llm.stream(messages, rid):
        last = time.perf_counter()
        first = first if first is not None else last
        tokens += delta.num_tokens
        text += delta.text
    ttft = ((first or last) - t0) * 1000
    per = (last - first) * 1000 / (tokens - 1) if first is not None and tokens > 1 else None
    return ttft, per, tokens, text


async def measure(model: str, reps: int) -> dict[str, Any]:
    from llm import build_llm
    from llm.base import ChatMessage
    from voice_pipeline.config import load_config
    from voice_pipeline.cpu import this_cpu
    from voice_pipeline.models import prepare_models
    from voice_pipeline.tools_model import tools_system_message
    from voice_pipeline.tuning import tuned_llm

    cfg = load_config(None)
    cfg = replace(cfg, llm=replace(cfg.llm, model=model, max_tokens=64))  # type: ignore[arg-type]
    paths = prepare_models(cfg, progress=lambda _: None)
    assert paths.llm is not None
    rss_before = _tree_rss_mib()
    t0 = time.monotonic()
    llm = build_llm(cfg.llm, paths.llm)
    load_s = time.monotonic() - t0
    rss = _tree_rss_mib()
    system = ChatMessage("system", cfg.dialogue.system_prompt)
    warm: list[float] = []
    per_token: list[float] = []
    out: dict[str, Any] = {}
    try:
        await _run(llm, [system, ChatMessage("user", "Hello.")], "warm-up")  # prefix + kernels
        for i in range(reps):
            q = ChatMessage("user", QUESTIONS[i % len(QUESTIONS)])
            warm.append((await _run(llm, [system, q], f"warm-{i}"))[0])
            story = ChatMessage("user", f"Tell me a short story about a cat named {CITIES[i % 6]}.")
            per = (await _run(llm, [system, story], f"decode-{i}"))[1]
            if per is not None:
                per_token.append(per)
        if "tools" in tools_chat_template(paths.llm):
            tool_sys = ChatMessage(
                "system", tools_system_message(paths.llm, cfg.dialogue.system_prompt, [WEATHER_TOOL])
            )
            runs = []
            for i in range(reps + 1):  # the first fills the prefix cache with the tool list
                q = ChatMessage("user", f"What's the weather like in {CITIES[i % 6]} right now?")
                runs.append(await _run(llm, [tool_sys, q], f"tool-{i}"))
            out["tool_turn_first_token_cold_ms"] = round(runs[0][0], 1)
            out["tool_turn_first_token_warm_ms"] = round(statistics.median(r[0] for r in runs[1:]), 1)
            out["tool_turn_tokens"] = statistics.median(r[2] for r in runs[1:])
            out["tool_turn_ms"] = round(
                statistics.median(r[0] + (r[1] or 0) * (r[2] - 1) for r in runs[1:]), 1
            )
            out["tool_turn_text"] = runs[1][3]
    finally:
        await llm.aclose()
    return {
        "model": model,
        "folder": str(paths.llm),
        "machine": this_cpu().label,
        "dtype": tuned_llm(cfg.llm).dtype,
        "load_s": round(load_s, 1),
        "rss_mib": round(rss),
        "rss_engine_mib": round(rss - rss_before),
        "first_token_warm_prefix_ms": round(statistics.median(warm), 1),
        "ms_per_token": round(statistics.median(per_token), 1),
        **out,
    }


def tools_chat_template(model_dir: Path) -> str:
    path = model_dir / "chat_template.jinja"
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2", "qwen2.5-coder-0.5b"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(asyncio.run(measure(args.one, args.reps))))
        return
    load_before = os.getloadavg()[0]
    results = []
    for model in args.models:
        print(f"measuring {model} ...", file=sys.stderr, flush=True)
        cmd = [sys.executable, __file__, "--one", model, "--reps", str(args.reps)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(f"  {model} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    if not results:
        raise SystemExit(1)
    print(f"machine: {results[0]['machine']}, dtype {results[0]['dtype']}")
    print(f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; medians of {args.reps}")
    cols = f"{'load s':>8}{'RSS MiB':>9}{'TTFT warm':>11}{'ms/tok':>8}{'tool TTFT':>11}{'tool ms':>9}"
    print(f"{'model':<22}{cols}")
    for r in results:
        tool = f"{r.get('tool_turn_first_token_warm_ms', '-'):>11}{r.get('tool_turn_ms', '-'):>9}"
        head = f"{r['model']:<22}{r['load_s']:>8}{r['rss_mib']:>9}"
        print(head + f"{r['first_token_warm_prefix_ms']:>11}{r['ms_per_token']:>8}" + tool)
        if "tool_turn_text" in r:
            print(f"  tool turn writes ({r['tool_turn_tokens']} tokens): {r['tool_turn_text']!r}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
