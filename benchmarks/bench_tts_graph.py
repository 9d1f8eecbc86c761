"""Piper with its voice file's graph against the rewritten one (``tts.conv2d``, tts/conv2d.py).

    .venv/bin/python benchmarks/bench_tts_graph.py [--threads 1 2] [--reps 15]

The pipeline's own engine (:class:`tts.piper.PiperTTS`) is loaded twice, with ``tts.conv2d``
off (the 1-D convolutions as the file has them) and on (as 2-D ones, onnxruntime's blocked
kernels), and synthesizes first chunks and whole clauses of the kind a reply starts with,
the two engines alternating call by call so that a change in the machine's speed falls on
both. Prints the CPU class first, then per text and thread count the median time of each
and their ratio, and what loading costs each. Asserts nothing (the audio is the same: see
tests/test_tts_piper.py). Run it on an otherwise idle machine. onnxruntime picks its kernels
from the CPU it runs on; ``VP_EMULATE_CPU=avx2`` does not cap them, so every figure is for
the CPU printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from tts.piper import PiperTTS
from voice_pipeline.config import load_config
from voice_pipeline.cpu import this_cpu
from voice_pipeline.models import prepare_models

TEXTS = (
    "Sure, here's",  # a first chunk at a comma
    "The capital of France",  # a first chunk before a phrase start
    "is Paris.",
    "Bees make honey from the nectar of flowers, which they collect.",  # a 10-word clause
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1], help="onnxruntime threads")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    print(f"CPU: {this_cpu().label}", flush=True)
    base = load_config(None)
    voice = prepare_models(base, progress=lambda m: None).tts
    for threads in args.threads:
        engines: dict[bool, PiperTTS] = {}
        for conv2d in (False, True):
            t0 = time.perf_counter()
            engines[conv2d] = PiperTTS(dataclasses.replace(base.tts, threads=threads, conv2d=conv2d), voice)
            print(
                f"{threads} thread(s), conv2d {conv2d}: loaded in {time.perf_counter() - t0:.2f} s",
                flush=True,
            )
        for text in TEXTS:
            times: dict[bool, list[float]] = {False: [], True: []}
            for rep in range(args.reps):
                for conv2d in (False, True) if rep % 2 else (True, False):
                    t0 = time.perf_counter()
                    engines[conv2d].synthesize(text)
                    times[conv2d].append((time.perf_counter() - t0) * 1e3)
            before, after = statistics.median(times[False]), statistics.median(times[True])
            print(
                f"{threads} thread(s) {text!r:70} file graph {before:6.1f} ms, conv2d {after:6.1f} ms"
                f" ({after / before:.2f}x)",
                flush=True,
            )
        for engine in engines.values():
            engine.close()


if __name__ == "__main__":
    main()
