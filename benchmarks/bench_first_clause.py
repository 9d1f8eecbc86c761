"""First clause and Piper's pauses: how short a first chunk can be before speech gets choppy.

    .venv/bin/python benchmarks/bench_first_clause.py [--words 4] [--first 0 2 3 4]
        [--trail-ms 120] [--synth-scale 1 2] [--head-first 0 1]

For each question: the real LLM reply is streamed once (token arrival times recorded),
then for every ``tts.min_clause_words`` (``--words``) and ``tts.first_chunk_words``
(``--first``; 0 = no short first chunk, the old rule) value the
:class:`tts.chunker.ClauseChunker` cuts it as the reply task would, and every clause is
synthesized by the real Piper voice (its time measured). A playout is simulated: clause k
starts at the later of the moment its audio is ready (its clause complete + its synthesis,
synthesis running one clause at a time) and the end of clause k-1. Printed per setting
(medians over the questions):

* first audio after the first token (ms): what the first clause costs the listener;
* the first clause's words and audio length;
* ``head`` 1: the first clause synthesized head first (``tts.head_first``, :mod:`tts.head_first`):
  its first ~0.28 s plays once decoded, the rest is decoded while it plays (an underrun if
  the rest is not ready when the head ends);
* underruns: the listener waits for audio in the middle of the reply (choppy), count
  and total ms, beyond Piper's own trailing silence;
* the gap between chunks: for each chunk after the first, when its audio was ready minus
  when the chunk before it finished playing (negative: ready that early, no gap); the
  worst (largest) per reply, median over the replies, and the worst of all;
* the trailing silence at clause ends that are not sentence ends (``--trail-ms`` trims
  them to that much in the simulation, as ``tts.max_trailing_silence_ms`` does for all).

``--synth-scale 2`` multiplies every synthesis time by 2: Piper beside the decoding LLM
measured 1.3-2.5x slower (README "Thread budgets"), so 2 is a fair loaded case.

The pipeline's default ``tts.max_trailing_silence_ms`` is 120. The LLM runs alone (its
times are those of an idle machine); Piper runs after it, not beside it (synthesis beside
the decoding LLM is about 1.3-2.5x slower, see README "Thread budgets"), so underruns here
are a lower bound. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

QUESTIONS = [
    "What is the capital of France?",
    "How many days are there in a week?",
    "Why is the sky blue?",
    "Name one planet in our solar system.",
    "What do bees make?",
    "How many legs does a spider have?",
    "What is the opposite of hot?",
    "Where does the sun rise?",
    "What is a good name for a cat?",
    "How do I boil an egg?",
]


def trailing_silence_ms(pcm: np.ndarray, rate: int, floor: float = 32767 * 10 ** (-50 / 20)) -> float:
    frame = rate // 200
    n = len(pcm) // frame
    if n == 0:
        return 0.0
    rms = np.sqrt(np.mean(pcm[: n * frame].astype(np.float64).reshape(n, frame) ** 2, axis=1))
    voiced = np.flatnonzero(rms >= floor)
    return 0.0 if voiced.size == 0 else (n - 1 - int(voiced[-1])) * 5.0


async def stream_reply(llm: Any, system: str, question: str, rid: str) -> list[tuple[float, str]]:
    from llm.base import ChatMessage

    t0 = time.perf_counter()
    out = []
    async for delta in llm.stream([ChatMessage("system", system), ChatMessage("user", question)], rid):
        out.append(((time.perf_counter() - t0) * 1000, delta.text))
    return out


def simulate(
    deltas: list[tuple[float, str]],
    words: int,
    tts: Any,
    trail_ms: int,
    cache: dict[str, tuple[np.ndarray, float]],
    first_words: int = 0,
    synth_scale: float = 1.0,
    verbose: bool = False,
    head_first: bool = False,
) -> dict[str, float]:
    from tts.chunker import ClauseChunker

    chunker = ClauseChunker(words, first_chunk_words=first_words)
    clauses: list[tuple[float, str]] = []
    for t, text in deltas:
        clauses += [(t, c) for c in chunker.push(text)]
    end_t = deltas[-1][0] if deltas else 0.0
    clauses += [(end_t, c) for c in chunker.flush()]
    first_token = deltas[0][0]
    rate = tts.sample_rate_hz
    synth_free = 0.0
    play_end = None
    first_audio = None
    underruns: list[float] = []
    gaps: list[float] = []
    mid_trails: list[float] = []
    first_count = first_len = 0.0
    for i, (ready_t, clause) in enumerate(clauses):
        if head_first and i == 0 and (parts := head_and_rest(tts, clause, cache)) is not None:
            (head, head_ms), (rest, rest_ms) = parts
            if not clause.rstrip("\"')]").endswith((".", "?", "!", "…")):
                mid_trails.append(trailing_silence_ms(rest, rate))  # trimmed as any chunk's
            start_synth = max(ready_t, synth_free)
            first_audio = start_synth + head_ms * synth_scale  # the head plays as soon as it is ready
            synth_free = first_audio + rest_ms * synth_scale  # the rest is decoded while it plays
            head_end = first_audio + len(head) / rate * 1000
            if synth_free > head_end:
                underruns.append(synth_free - head_end)
            gaps.append(synth_free - head_end)
            first_count, first_len = len(clause.split()), (len(head) + len(rest)) / rate * 1000
            play_end = max(synth_free, head_end) + len(rest) / rate * 1000
            continue
        if clause not in cache:
            t0 = time.perf_counter()
            pcm = tts.synthesize(clause)
            cache[clause] = (pcm, (time.perf_counter() - t0) * 1000)
        pcm, synth_ms = cache[clause]
        synth_ms *= synth_scale
        sentence_end = clause.rstrip("\"')]").endswith((".", "?", "!", "…"))
        trail = trailing_silence_ms(pcm, rate)
        dur = len(pcm) / rate * 1000
        if not sentence_end:
            mid_trails.append(trail)
            dur -= max(0.0, trail - trail_ms)
        start_synth = max(ready_t, synth_free)
        synth_free = start_synth + synth_ms
        start = synth_free if play_end is None else max(synth_free, play_end)
        if play_end is not None:
            gaps.append(synth_free - play_end)
            if start > play_end:
                underruns.append(start - play_end)
        if first_audio is None:
            first_audio = start
            first_count, first_len = len(clause.split()), dur
        play_end = start + dur
        _ = i
    if underruns and verbose:
        print(f"underrun {sum(underruns):.0f} ms: {[c for _, c in clauses]}", file=sys.stderr)
    return {
        "first_audio_ms": (first_audio or 0.0) - first_token,
        "first_words": first_count,
        "first_audio_len_ms": first_len,
        "underruns": len(underruns),
        "underrun_ms": sum(underruns),
        "worst_gap_ms": max(gaps) if gaps else -math.inf,
        "mid_trail_ms": statistics.median(mid_trails) if mid_trails else 0.0,
        "clauses": len(clauses),
    }


def head_and_rest(
    tts: Any, clause: str, cache: dict[str, tuple[np.ndarray, float]]
) -> tuple[tuple[np.ndarray, float], tuple[np.ndarray, float]] | None:
    """``clause`` synthesized head first (``tts.head_first``): (head, its ms), (rest, its ms);
    None if it comes whole (a short chunk)."""
    if f"head:{clause}" not in cache:
        t0 = time.perf_counter()
        parts = tts.synthesize_head(clause)
        cache[f"head:{clause}"] = (parts.head, (time.perf_counter() - t0) * 1000)
        if parts.rest is not None:
            t0 = time.perf_counter()
            rest = parts.rest()
            cache[f"rest:{clause}"] = (rest, (time.perf_counter() - t0) * 1000)
    if f"rest:{clause}" not in cache:
        return None
    return cache[f"head:{clause}"], cache[f"rest:{clause}"]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--words", type=int, nargs="+", default=[4], help="tts.min_clause_words values")
    ap.add_argument("--first", type=int, nargs="+", default=[0, 2, 3, 4], help="tts.first_chunk_words values")
    ap.add_argument("--trail-ms", type=int, nargs="+", default=[120])
    ap.add_argument("--synth-scale", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--verbose", action="store_true", help="print the clauses of replies with underruns")
    ap.add_argument("--head-first", type=int, nargs="+", default=[0, 1], help="tts.head_first values: 0, 1")
    args = ap.parse_args()
    from llm import build_llm
    from tts import build_tts
    from voice_pipeline.config import load_config
    from voice_pipeline.cpu import this_cpu
    from voice_pipeline.models import prepare_models
    from voice_pipeline.tuning import choose

    cfg = load_config(None)
    tuning = choose(this_cpu(), cfg.llm, cfg.asr)
    paths = prepare_models(cfg, progress=lambda _: None)
    tts = build_tts(cfg.tts, paths.tts)
    llm = build_llm(tuning.llm(cfg.llm), paths.llm)
    load_before = os.getloadavg()[0]
    try:
        await stream_reply(llm, cfg.dialogue.system_prompt, "Hello.", "warm-up")
        tts.synthesize("Hello there.")
        replies = [
            await stream_reply(llm, cfg.dialogue.system_prompt, q, f"q{i}") for i, q in enumerate(QUESTIONS)
        ]
    finally:
        await llm.aclose()
    cache: dict[str, tuple[np.ndarray, float]] = {}
    print(f"machine: {tuning.cpu.label}; {tuning.settings_label()}")
    print(f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; {len(QUESTIONS)} replies")
    print(f"{'synth':>5}{'words':>6}{'first':>6}{'head':>5}{'trail':>6}{'1st audio':>10}{'1st words':>10}"
          f"{'1st len':>8}{'underruns':>10}{'under ms':>9}{'gap p50':>8}{'gap max':>8}"
          f"{'mid trail':>10}")  # fmt: skip
    for scale in args.synth_scale:
        for words in args.words:
            for first in args.first:
                for trail, head in ((t, h) for t in args.trail_ms for h in args.head_first):
                    setting = (trail, cache, first, scale, args.verbose, bool(head))
                    rows = [simulate(r, words, tts, *setting) for r in replies if r]
                    med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
                    print(
                        f"{scale:>5.1f}{words:>6}{first:>6}{head:>5}{trail:>6}{med['first_audio_ms']:>10.0f}"
                        f"{med['first_words']:>10.0f}{med['first_audio_len_ms']:>8.0f}"
                        f"{sum(row['underruns'] for row in rows):>10.0f}"
                        f"{sum(row['underrun_ms'] for row in rows):>9.0f}{med['worst_gap_ms']:>8.0f}"
                        f"{max(row['worst_gap_ms'] for row in rows):>8.0f}{med['mid_trail_ms']:>10.0f}"
                    )
    tts.close()
    print(
        "(underruns, under ms: totals over all replies; gap: each reply's worst chunk-ready minus "
        "previous-chunk-end, p50 and max over replies, > 0 is an underrun; the rest: medians)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    asyncio.run(main())
