"""Voice-to-voice benchmark: N real spoken turns through the real pipeline, real time.

    .venv/bin/python benchmarks/bench_turns.py [--turns 20] [--json out.json]

Questions are spoken by espeak-ng (apt-get install espeak-ng), one session per
question, fed in real time like a live microphone. Prints per-stage and
voice-to-voice p50/p95 (from the ledger), the same figure measured
independently on the output timeline, and peak RSS. Prints figures; asserts
nothing.

The engines are warmed up as ``serve`` and ``run`` warm them (no uncounted warm-up turn):
the first session after start has two turns, and their stage times are printed side by
side, so a cold first turn would show. Every figure is printed with the machine's CPU
class and the settings chosen for it.
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
from voice_pipeline.ledger.aggregate import SessionLedger, percentile
from voice_pipeline.ledger.ledger import STAGES
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
    await engines.warm_up(cfg.dialogue.system_prompt)
    # the first session after start: turn 1 and turn 2, side by side (a cold first turn shows)
    gap = np.zeros(int(1.5 * 16000), np.float32)
    two = np.concatenate([np.zeros(8000, np.float32), clips[QUESTIONS[1]], gap, clips[QUESTIONS[2]], gap])
    first_session = await run_audio(engines, cfg, two, 16000)
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
    tuning = engines.tuning
    assert tuning is not None
    print(
        f"\nmachine: {tuning.cpu.label}; {tuning.settings_label()}; Python {platform.python_version()}; "
        f"{args.turns} turns in {time.monotonic() - t0:.0f} s, load {os.getloadavg()[0]:.2f} at the end"
    )
    recs = first_session.records
    if len(recs) >= 2:
        print("first session after start (ms):")
        print(f"  {'stage':<18}{'turn 1':>8}{'turn 2':>8}")
        for stage in STAGES:
            a, b = recs[0].stages_ms.get(stage.name), recs[1].stages_ms.get(stage.name)
            if a is not None and b is not None:
                print(f"  {stage.name:<18}{a:>8.0f}{b:>8.0f}")
    else:
        print(f"first session after start: {len(recs)} turn(s) detected (expected 2)")
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
                {
                    "machine": tuning.as_dict(),
                    "summary": summary,
                    "v2v_out_ms": out_v2v,
                    "peak_rss_mb": peak_rss_mb,
                    "turns": args.turns,
                    "first_session": [r.stages_ms for r in recs],
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    asyncio.run(main())
