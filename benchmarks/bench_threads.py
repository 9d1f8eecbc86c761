"""Thread budgets: how fast each stage runs with N threads, alone and while the LLM decodes.

    .venv/bin/python benchmarks/bench_threads.py [--llm 1 2] [--asr 1 2] [--tts 1 2] [--reps 7]

Each LLM thread count gets a fresh process (vLLM's engine reads OMP_NUM_THREADS once,
when it is spawned). In each process: the LLM's time to first token and ms per token
on a short prompt, alone; then faster-whisper decoding a 3 s question and Piper
synthesizing a clause, for every thread count given, alone and while a long LLM
reply is being generated (the contention that matters in a turn). Prints medians;
asserts nothing. Run it on an otherwise idle machine.
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
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

QUESTION = "What is the capital of France?"
CLAUSE = "The capital of France is Paris, a city on the Seine."


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 1)


async def _llm_figures(llm: Any, reps: int) -> dict[str, float]:
    from llm.base import ChatMessage

    ttft: list[float] = []
    per_token: list[float] = []
    for i in range(reps):
        msgs = [ChatMessage("user", f"Tell me a short story about a cat. ({i})")]
        t0 = time.perf_counter()
        first = last = 0.0
        tokens = 0
        async for delta in llm.stream(msgs, f"bench-{i}"):
            now = time.perf_counter()
            if not first:
                first = now
            last = now
            tokens += delta.num_tokens
        ttft.append(first - t0)
        if tokens > 1:
            per_token.append((last - first) / (tokens - 1))
    return {"ttft_ms": _median_ms(ttft), "ms_per_token": _median_ms(per_token)}


async def _background_llm(llm: Any, stop: asyncio.Event) -> int:
    from llm.base import ChatMessage

    n = 0
    while not stop.is_set():
        msgs = [ChatMessage("user", "Tell me a very long story about a dragon and a knight.")]
        async for _ in llm.stream(msgs, f"bg-{n}"):
            if stop.is_set():
                break
        n += 1
    return n


async def _timed_in_thread(fn: Any, reps: int) -> float:
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await asyncio.to_thread(fn)
        samples.append(time.perf_counter() - t0)
    return _median_ms(samples)


async def _alone_and_beside_llm(llm: Any, fn: Any, reps: int) -> dict[str, float]:
    """Median time of ``fn`` in a thread, alone, then while a long LLM reply is generated."""
    fn()  # warm-up
    alone = await _timed_in_thread(fn, reps)
    stop = asyncio.Event()
    bg = asyncio.create_task(_background_llm(llm, stop))
    await asyncio.sleep(0.3)
    loaded = await _timed_in_thread(fn, reps)
    stop.set()
    await bg
    return {"alone_ms": alone, "llm_decoding_ms": loaded}


async def measure(
    llm_threads: int, asr_threads: list[int], tts_threads: list[int], reps: int
) -> dict[str, Any]:
    from asr import build_asr
    from llm import build_llm
    from tts import build_tts
    from voice_pipeline.audio import resample
    from voice_pipeline.config import load_config
    from voice_pipeline.models import prepare_models

    cfg = load_config(None)
    paths = prepare_models(cfg, progress=lambda _: None)
    llm = build_llm(replace(cfg.llm, threads=llm_threads), paths.llm)
    out: dict[str, Any] = {"llm_threads": llm_threads}
    try:
        await _llm_figures(llm, 2)  # warm-up
        out["llm_alone"] = await _llm_figures(llm, reps)
        tts0 = build_tts(cfg.tts, paths.tts)
        speech = resample(tts0.synthesize(QUESTION).astype("float32") / 32768, tts0.sample_rate_hz, 16000)
        tts0.close()
        for n in asr_threads:
            asr = build_asr(replace(cfg.asr, cpu_threads=n), paths.asr)
            out[f"asr_{n}_threads"] = await _alone_and_beside_llm(
                llm, lambda a=asr: a.transcribe(speech), reps
            )
            asr.close()
        for n in tts_threads:
            tts = build_tts(replace(cfg.tts, threads=n), paths.tts)
            out[f"tts_{n}_threads"] = await _alone_and_beside_llm(
                llm, lambda t=tts: t.synthesize(CLAUSE), reps
            )
            tts.close()
        # and the LLM's own speed while ASR runs beside it (the speculative decode overlaps it)
        from voice_pipeline.tuning import tuned_asr

        asr_cfg = tuned_asr(cfg.asr)  # the ASR threads the pipeline would use here
        asr = build_asr(asr_cfg, paths.asr)
        stop_asr = False

        def asr_loop() -> None:
            while not stop_asr:
                asr.transcribe(speech)

        worker = asyncio.create_task(asyncio.to_thread(asr_loop))
        await asyncio.sleep(0.2)
        out[f"llm_while_asr_{asr_cfg.cpu_threads}_threads"] = await _llm_figures(llm, reps)
        stop_asr = True
        await worker
        asr.close()
    finally:
        await llm.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llm", type=int, nargs="+", default=[1, 2], help="vLLM OpenMP thread counts")
    ap.add_argument("--asr", type=int, nargs="+", default=[1, 2], help="CTranslate2 cpu_threads values")
    ap.add_argument("--tts", type=int, nargs="+", default=[1, 2], help="Piper onnxruntime thread counts")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child mode: one LLM thread count
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(asyncio.run(measure(args.one, args.asr, args.tts, args.reps))))
        return
    results = []
    for n in args.llm:
        print(f"measuring with vLLM OMP threads = {n} ...", file=sys.stderr, flush=True)
        cmd = [
            sys.executable,
            __file__,
            "--one",
            str(n),
            "--reps",
            str(args.reps),
            "--asr",
            *map(str, args.asr),
            "--tts",
            *map(str, args.tts),
        ]
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            sys.exit(f"child failed:\n{proc.stderr[-3000:]}")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    from voice_pipeline.config import load_config
    from voice_pipeline.cpu import this_cpu
    from voice_pipeline.tuning import choose

    cfg = load_config(None)
    tuning = choose(this_cpu(), cfg.llm, cfg.asr)
    print(f"machine: {tuning.cpu.label}; LLM {tuning.dtype}; load {os.getloadavg()[0]:.2f} at the end")
    for r in results:
        print(f"\nvLLM threads {r['llm_threads']}:")
        for key, value in r.items():
            if key != "llm_threads":
                print(f"  {key:24s} {value}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
