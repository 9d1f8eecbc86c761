"""Voice-to-voice benchmark: N real spoken turns through the real pipeline, real time.

    .venv/bin/python benchmarks/bench_turns.py [--turns 20] [--json out.json]

Questions are spoken by espeak-ng (apt-get install espeak-ng), one session per
question, fed in real time like a live microphone. Prints per-stage and
voice-to-voice p50/p95 (from the ledger), the same figure measured
independently on the output timeline, and peak RSS. Prints figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from voice_pipeline.audio import resample
from voice_pipeline.config import load_config
from voice_pipeline.engines import Engines
from voice_pipeline.ledger import STAGES, SessionLedger, percentile
from voice_pipeline.models import prepare_models
from voice_pipeline.runner import run_audio

QUESTIONS = [
    "What is the capital of France?",
    "How many days are there in a week?",
    "What color is the sky on a clear day?",
    "Name one planet in our solar system.",
    "What do bees make?",
    "How many legs does a spider have?",
    "What is the opposite of hot?",
    "Which animal says moo?",
    "What is two plus two?",
    "Where does the sun rise?",
]


def espeak(text: str) -> np.ndarray:
    exe = shutil.which("espeak-ng")
    if exe is None:
        sys.exit("espeak-ng is needed: apt-get install espeak-ng")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "q.wav"
        subprocess.run([exe, "-v", "en-us+f3", "-s", "150", "-w", str(path), text], check=True)
        audio, sr = sf.read(path, dtype="float32")
    return resample(audio.astype(np.float32), sr, 16000)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cfg = load_config(None)
    engines = Engines.load(
        cfg, prepare_models(cfg, progress=lambda m: None), lambda m: print(m, file=sys.stderr)
    )
    clips = {q: espeak(q) for q in QUESTIONS}
    await engines.warm_up(cfg.llm.system_prompt)
    # warm-up turn, not counted (first-call allocations in every engine)
    await run_audio(engines, cfg, np.concatenate([np.zeros(8000, np.float32), clips[QUESTIONS[0]]]), 16000)
    ledger = SessionLedger(cfg.budget)
    out_v2v: list[float] = []
    t0 = time.monotonic()
    for i in range(args.turns):
        q = QUESTIONS[i % len(QUESTIONS)]
        lead = np.zeros(8000, np.float32)
        res = await run_audio(engines, cfg, np.concatenate([lead, clips[q]]), 16000)
        for rec in res.records:
            ledger.add(rec)
        last_sound = int(np.flatnonzero(np.abs(clips[q]) > 0.003)[-1]) + 1  # acoustic end, -50 dBFS
        speech_end = int((len(lead) + last_sound) / 16000 * res.output_rate_hz)
        loud = np.flatnonzero(np.abs(res.output[speech_end:].astype(np.int32)) > 100)
        if loud.size:
            out_v2v.append(loud[0] / res.output_rate_hz * 1000)
        rec = res.records[-1] if res.records else None
        v2v = rec.stages_ms.get("voice_to_voice", float("nan")) if rec else float("nan")
        print(
            f"turn {i + 1:>2}: v2v {v2v:6.0f} ms  {q!r} -> {rec.assistant_text[:60]!r}"
            if rec
            else f"turn {i + 1:>2}: no turn detected",
            file=sys.stderr,
        )
    await engines.aclose()
    summary = ledger.summary()
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"{args.turns} turns in {time.monotonic() - t0:.0f} s"
    )
    print(f"{'stage':<18}{'p50':>8}{'p95':>8}{'budget':>8}")
    for stage in STAGES:
        s = summary.get(stage.name)
        if s:
            print(f"{stage.name:<18}{s['p50']:>8.0f}{s['p95']:>8.0f}{s['budget']:>8.0f}")
    if out_v2v:
        print(
            f"{'v2v on OUT':<18}{percentile(out_v2v, 50):>8.0f}{percentile(out_v2v, 95):>8.0f}"
            "   (true end of speech -> first audible reply sample, measured on the output file)"
        )
    print(f"peak RSS: {peak_rss_mb:.0f} MB")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"summary": summary, "v2v_out_ms": out_v2v, "peak_rss_mb": peak_rss_mb, "turns": args.turns},
                indent=2,
            )
        )


if __name__ == "__main__":
    asyncio.run(main())
