"""vLLM's own CPU guidance, measured here: preloaded allocators and OpenMP, thread binding,
threads, torch.compile, chunked prefill, max_num_seqs.

    .venv/bin/python benchmarks/bench_vllm_cpu.py [--variants baseline tcmalloc ...] [--reps 6]

Every variant gets a fresh process (vLLM reads these at engine start; ``LD_PRELOAD`` only
works on a new process), with the machine's chosen settings otherwise. In each: engine
start time; first token of a turn-sized prompt cold and with the system prompt cached;
ms per generated token; and four concurrent requests (first token p50, total tokens/s) --
the shape of four sessions answering at once. Medians; asserts nothing. Variants are
run in the order given, and the baseline again at the end, so drift shows.

Variants (``--variants``):

* ``baseline`` -- the default: eager, 1 OpenMP thread (2-core machine), no preload.
* ``tcmalloc`` -- ``LD_PRELOAD`` Debian's ``libtcmalloc_minimal.so.4``.
* ``iomp`` -- ``LD_PRELOAD`` PyPI intel-openmp's ``libiomp5.so`` (the venv's ``lib/``).
* ``tcmalloc+iomp`` -- both, as vLLM's CPU guide says.
* ``bind`` -- ``OMP_PROC_BIND=close OMP_PLACES=cores`` (GNU OpenMP binding of the engine's threads).
* ``threads2`` -- 2 OpenMP threads.
* ``compile`` -- torch.compile with vLLM's AOT compile cache (``VLLM_USE_AOT_COMPILE=1``,
  its default), cache in ``--compile-cache``. With vllm-cpu 0.32 and torch 2.13 that cache
  never loads ("'function' object has no attribute 'finalize_loading'"), so every start
  compiles again (70-100 s).
* ``compile-cached`` -- ``llm.compile: compile`` as the engine runs it (vLLM's older compile
  cache, which does load; run it twice: the first start may fill the cache).

Every variant but the compile ones runs eager (``llm.compile: eager``), whatever the
machine's default.
* ``no-chunked-prefill`` -- ``enable_chunked_prefill=False``.
* ``max-seqs-4`` -- ``max_num_seqs=4``.
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

TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
IOMP = str(Path(sys.prefix) / "lib" / "libiomp5.so")

VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "tcmalloc": {"env": {"LD_PRELOAD": TCMALLOC}},
    "iomp": {"env": {"LD_PRELOAD": IOMP}},
    "tcmalloc+iomp": {"env": {"LD_PRELOAD": f"{TCMALLOC}:{IOMP}"}},
    "bind": {"env": {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}},
    "threads2": {"threads": 2},
    "compile": {"compile": "compile", "env": {"VLLM_USE_AOT_COMPILE": "1"}},
    "compile-cached": {"compile": "compile"},
    "no-chunked-prefill": {"engine": {"enable_chunked_prefill": False}},
    "max-seqs-4": {"engine": {"max_num_seqs": 4}},
}
QUESTIONS = [
    "What is the capital of France?",
    "How many days are there in a week?",
    "What color is the sky on a clear day?",
    "Name one planet in our solar system.",
    "What do bees make?",
    "How many legs does a spider have?",
    "What is the opposite of hot?",
    "Which animal says moo?",
]


async def _first(llm: Any, messages: list[Any], rid: str) -> float:
    t0 = time.perf_counter()
    stream = llm.stream(messages, rid)
    try:
        async for _ in stream:
            return (time.perf_counter() - t0) * 1000
    finally:
        await stream.aclose()
    return float("nan")


async def _full(llm: Any, messages: list[Any], rid: str, t0: float) -> tuple[float, list[float], int]:
    first = None
    times: list[float] = []
    tokens = 0
    async for delta in llm.stream(messages, rid):
        now = time.perf_counter()
        first = first if first is not None else (now - t0) * 1000
        times.append(now)
        tokens += delta.num_tokens
    return first or float("nan"), times, tokens


async def measure(name: str, reps: int) -> dict[str, Any]:
    from llm.base import ChatMessage
    from llm.vllm_engine import VLLMEngine
    from voice_pipeline.config import load_config
    from voice_pipeline.cpu import this_cpu
    from voice_pipeline.models import prepare_models
    from voice_pipeline.tuning import choose

    spec = VARIANTS[name]
    cfg = load_config(None)
    llm_cfg = replace(cfg.llm, threads=spec.get("threads", 0), compile=spec.get("compile", "eager"))
    tuning = choose(this_cpu(), llm_cfg, cfg.asr)
    paths = prepare_models(cfg, progress=lambda _: None)
    assert paths.llm is not None
    t0 = time.monotonic()
    llm = VLLMEngine(tuning.llm(llm_cfg), paths.llm, engine_args=spec.get("engine"))
    start_s = time.monotonic() - t0
    system = ChatMessage("system", cfg.dialogue.system_prompt)
    cold: list[float] = []
    warm: list[float] = []
    per_token: list[float] = []
    conc_first: list[float] = []
    conc_tps: list[float] = []
    stamp = time.monotonic_ns()
    try:
        await _first(llm, [system, ChatMessage("user", "Hello.")], "warm-up")
        for i in range(reps):
            q = ChatMessage("user", QUESTIONS[i % len(QUESTIONS)])
            unique = ChatMessage("system", f"Session {stamp}-{i}. {cfg.dialogue.system_prompt}")
            cold.append(await _first(llm, [unique, q], f"cold-{i}"))
            warm.append(await _first(llm, [system, q], f"warm-{i}"))
            story = [system, ChatMessage("user", f"Tell me a short story about a cat named {i}.")]
            _, times, tokens = await _full(llm, story, f"dec-{i}", time.perf_counter())
            if tokens > 2:
                per_token.append((times[-1] - times[0]) / (tokens - 1) * 1000)
            t1 = time.perf_counter()
            runs = await asyncio.gather(
                *(
                    _full(llm, [system, ChatMessage("user", QUESTIONS[(i + k) % 8])], f"c{i}-{k}", t1)
                    for k in range(4)
                )
            )
            conc_first += [r[0] for r in runs]
            conc_tps.append(sum(r[2] for r in runs) / (max(r[1][-1] for r in runs if r[1]) - t1))
    finally:
        await llm.aclose()
    return {
        "variant": name,
        "machine": tuning.cpu.label,
        "settings": tuning.settings_label(),
        "engine_start_s": round(start_s, 1),
        "first_token_cold_ms": round(statistics.median(cold), 1),
        "first_token_warm_ms": round(statistics.median(warm), 1),
        "ms_per_token": round(statistics.median(per_token), 1),
        "concurrent4_first_token_ms": round(statistics.median(conc_first), 1),
        "concurrent4_tokens_per_s": round(statistics.median(conc_tps), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--compile-cache", default=None, help="TORCHINDUCTOR/vLLM compile cache folder")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(asyncio.run(measure(args.one, args.reps))))
        return
    order = list(args.variants)
    if order and order[0] == "baseline" and len(order) > 1:
        order.append("baseline")  # again at the end: drift
    load_before = os.getloadavg()[0]
    results = []
    for name in order:
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        drop = ("OMP_NUM_THREADS", "LD_PRELOAD", "VLLM_USE_AOT_COMPILE")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update(VARIANTS[name].get("env", {}))
        if args.compile_cache:
            env["VLLM_CACHE_ROOT"] = args.compile_cache
        cmd = [sys.executable, __file__, "--one", name, "--reps", str(args.reps)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            print(f"  {name} failed:\n{proc.stderr[-1500:]}", file=sys.stderr)
            results.append({"variant": name, "failed": proc.stderr[-300:]})
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    ok = [r for r in results if "failed" not in r]
    if ok:
        print(f"machine: {ok[0]['machine']}")
    print(f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; medians of {args.reps}")
    cols = ("engine_start_s", "first_token_cold_ms", "first_token_warm_ms", "ms_per_token",
            "concurrent4_first_token_ms", "concurrent4_tokens_per_s")  # fmt: skip
    print(f"{'variant':<20}{'start s':>8}{'cold':>8}{'warm':>8}{'ms/tok':>8}{'4x TTFT':>9}{'4x tok/s':>9}")
    for r in results:
        if "failed" in r:
            print(f"{r['variant']:<20}failed")
            continue
        print(f"{r['variant']:<20}" + "".join(f"{r[c]:>{9 if c.startswith('conc') else 8}}" for c in cols))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
