"""The speculative reply, before and after: voice-to-voice of complete questions, interleaved.

    .venv/bin/python benchmarks/bench_speculation.py [--reps 3] [--voices en-us+f3,en-gb+m1]
                                                     [--modes before,after] [--json out.json]
                                                     [--config my.yaml]

Every complete question of :data:`voice_pipeline.bench.paused.COMPLETE_QUESTIONS` (plus a
few more) is spoken by espeak-ng in each voice, ``--reps`` times, through the real pipeline
(Silero, Whisper, the turn model, vLLM, Piper) in its own session, in real time, with the
modes interleaved question by question so that load on the machine hits both alike:

* ``before`` -- the reply computed after the turn ends, as until 2026-12: the LLM prefetched
  on the speculative transcript but nothing synthesized ahead (``dialogue.speculative_audio``
  off), the first chunk a whole clause (``tts.first_chunk_words: 0``), the turn model after
  the words, 2 Whisper threads, the 10 s window alone;
* ``after`` -- the defaults: the speculative reply's short first chunk synthesized and held
  during the pause, the turn model and the Whisper threads chosen for the CPU (``auto``);
* ``file-graph`` -- the defaults, but Piper runs the voice file's own graph (``tts.conv2d``
  off: its 1-D convolutions as they are, not as 2-D ones; a second engine).
* ``no-guess`` -- the defaults, but the held first chunk's synthesis waits for the token
  that cuts it (:meth:`tts.chunker.ClauseChunker.tentative` answers None during its turns).
* ``whole-first`` -- the defaults, but the first chunk synthesized whole (``tts.head_first``
  off), not its first ~0.28 s before the rest (:mod:`tts.head_first`).
* ``asr2`` -- the defaults, but 2 Whisper threads (the "before" engine) where the machine's
  choice is 1;
* ``10s-window`` -- the defaults, but Whisper's 10 s window alone where the machine's choice
  adds shorter ones (``asr.short_windows: off``; :func:`asr.window.choose_short_windows`);
* ``model-words`` -- the defaults, but the turn model started once the words are in
  (``turn.model_start: words``), not beside the decode;
* ``no-partials`` -- the defaults, but no partial transcripts (``asr.partial_interval_ms: 0``):
  no partial decode is on the engine when the pause's decode starts;
* ``lean`` -- ``model-words`` and ``no-partials`` together;
* ``noverdict`` -- the defaults, but no longer wait after neutral words for a turn model's
  verdict on its way (``turn.verdict_silence_ms`` = ``unsure_silence_ms``, as until 2026-12-05);
* ``wait<N>`` -- the defaults, but a short wait (``vad.end_silence_ms``) of N ms, e.g.
  ``wait600`` (:mod:`voice_pipeline.bench.variants`);
* ``void-runs`` -- the defaults, but work made void by speech that resumed runs to its end
  (as until 2026-12-05): the turn model is not stopped (:class:`vad.base.StopSignal`) and a
  Whisper decode goes on from its encoder to its decoder.

Per mode: voice-to-voice p50/p95 (ledger; it agrees with the wire within a frame),
endpointing p50, when the words came back (p50, after the end of speech), how often the
turn model's verdict was recorded, how often a prepared reply was released and its audio
was ready before the endpoint. Prints the CPU class first (emulated classes say so); prints
figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from speech import espeak

from asr import build_asr
from asr.fast_path import WindowDecoder
from tts import build_tts
from tts.chunker import ClauseChunker
from vad.base import StopSignal
from voice_pipeline.bench.paused import COMPLETE_QUESTIONS
from voice_pipeline.bench.variants import turn_variant
from voice_pipeline.config import Config, load_config
from voice_pipeline.cpu import this_cpu
from voice_pipeline.engines import Engines
from voice_pipeline.ledger.aggregate import percentile
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.models import prepare_models
from voice_pipeline.runner import run_audio
from voice_pipeline.tuning import choose_first_chunk_words

RATE = 16000
QUESTIONS = (*COMPLETE_QUESTIONS, "Can you recommend a good book?", "How far away is the moon?")


def mode_config(base: Config, mode: str) -> Config:
    if mode == "before":
        return dataclasses.replace(
            base,
            dialogue=dataclasses.replace(base.dialogue, speculative_audio=False),
            turn=dataclasses.replace(base.turn, model_start="words"),
            tts=dataclasses.replace(base.tts, first_chunk_words=0),
        )
    if mode in ("model-words", "lean"):
        base = dataclasses.replace(base, turn=dataclasses.replace(base.turn, model_start="words"))
    if mode in ("no-partials", "lean"):
        base = dataclasses.replace(base, asr=dataclasses.replace(base.asr, partial_interval_ms=0))
    if (variant := turn_variant(base, mode)) is not None:
        return variant
    if mode == "whole-first":
        return dataclasses.replace(base, tts=dataclasses.replace(base.tts, head_first=False))
    return base


@contextlib.contextmanager
def void_runs(on: bool) -> Iterator[None]:
    """Void work runs to its end (``void-runs``): no stop signal, no question after the encoder."""
    if not on:
        yield
        return
    stop, decode = StopSignal.stop, WindowDecoder.decode

    def decode_to_the_end(self: WindowDecoder, *args: Any, wanted: object = None) -> str | None:
        return decode(self, *args)

    StopSignal.stop = lambda self: None  # type: ignore[method-assign]
    WindowDecoder.decode = decode_to_the_end  # type: ignore[method-assign]
    try:
        yield
    finally:
        StopSignal.stop, WindowDecoder.decode = stop, decode  # type: ignore[method-assign]


@contextlib.contextmanager
def guessing(on: bool) -> Iterator[None]:
    """The first chunk guessed a token early (the default), or not (``no-guess``)."""
    if on:
        yield
        return
    real = ClauseChunker.tentative
    ClauseChunker.tentative = lambda self: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        ClauseChunker.tentative = real  # type: ignore[method-assign]


async def one(engines: Engines, cfg: Config, audio: np.ndarray) -> TurnRecord | None:
    padded = np.concatenate([np.zeros(RATE // 2, np.float32), audio, np.zeros(RATE, np.float32)])
    res = await run_audio(engines, cfg, padded, RATE, realtime=True)
    turns = [r for r in res.records if r.user_text]
    return turns[-1] if turns else None


def summary(rows: list[TurnRecord]) -> dict[str, Any]:
    v2v = [r.stages_ms["voice_to_voice"] for r in rows if "voice_to_voice" in r.stages_ms]
    ep = [r.stages_ms["endpointing"] for r in rows if "endpointing" in r.stages_ms]
    eots = [r.end_of_turn for r in rows if r.end_of_turn is not None]
    words = [e.words_after_ms for e in eots if e.words_after_ms is not None]
    spec = [r.speculation for r in rows if r.speculation is not None]
    held = [r.marks_ns for r in rows if "audio_held" in r.marks_ns]
    ready = [m for m in held if m["audio_held"] <= m["endpoint"]]
    return {
        "turns": len(rows),
        "v2v_p50_ms": round(percentile(v2v, 50)),
        "v2v_p95_ms": round(percentile(v2v, 95)),
        "endpointing_p50_ms": round(percentile(ep, 50)),
        "words_after_speech_end_p50_ms": round(percentile(words, 50)) if words else None,
        "p_complete_recorded": sum(e.p_complete is not None for e in eots),
        "released": sum(s.released > 0 for s in spec),
        "audio_ready_before_endpoint": len(ready),
        "rules": {rule: sum(e.rule == rule for e in eots) for rule in {e.rule for e in eots}},
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2, help="repeats of each question per voice and mode")
    ap.add_argument("--voices", default="en-us+f3,en-gb+m1", help="espeak-ng voices, comma-separated")
    ap.add_argument("--modes", default="before,after")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--config", type=Path, help="YAML config the modes start from (default: the defaults)")
    args = ap.parse_args()
    cpu = this_cpu()
    print(f"CPU: {cpu.label}", flush=True)
    base = load_config(args.config)
    paths = prepare_models(base, progress=lambda m: None)
    engines = Engines.load(base, paths, progress=lambda m: print(m, flush=True))
    await engines.warm_up(base.dialogue.system_prompt)
    assert engines.tuning is not None
    # "before" decoded with 2 Whisper threads (the old choice on every class) in the 10 s window
    # alone: the same engine where that is still the choice, else a second one; "10s-window"
    # the machine's threads in the 10 s window alone
    modes = args.modes.split(",")
    tuned_asr = engines.tuning.asr(base.asr)
    short = bool(getattr(engines.asr, "windows", ()))
    print(f"Whisper's shorter windows: {getattr(engines.asr, 'windows', ())} (asr.short_windows)", flush=True)
    asr_before = engines.asr
    if engines.tuning.asr_threads != 2 or short:
        before_cfg = dataclasses.replace(tuned_asr, cpu_threads=2, short_windows="off")
        asr_before = build_asr(before_cfg, paths.asr)
    asr_long = engines.asr
    if short and "10s-window" in modes:
        asr_long = build_asr(dataclasses.replace(tuned_asr, short_windows="off"), paths.asr)
    tts_file_graph = engines.tts
    if "file-graph" in modes:
        tts_file_graph = build_tts(dataclasses.replace(base.tts, conv2d=False), paths.tts)
    rows: dict[str, list[TurnRecord]] = {m: [] for m in modes}
    for rep in range(args.reps):
        for voice in args.voices.split(","):
            for q in QUESTIONS:
                audio = espeak(q, voice=voice)
                for mode in modes if rep % 2 == 0 else modes[::-1]:
                    eng = engines
                    if mode in ("before", "asr2"):
                        eng = dataclasses.replace(engines, asr=asr_before)
                    elif mode == "10s-window":
                        eng = dataclasses.replace(engines, asr=asr_long)
                    elif mode == "file-graph":
                        eng = dataclasses.replace(engines, tts=tts_file_graph)
                    with guessing(mode != "no-guess"), void_runs(mode == "void-runs"):
                        rec = await one(eng, mode_config(base, mode), audio)
                    if rec is None:
                        print(f"[{mode}] {voice} no turn for {q!r}", flush=True)
                        continue
                    rows[mode].append(rec)
                    eot = rec.end_of_turn
                    print(
                        f"[{mode:6}] {voice:9} v2v {rec.stages_ms.get('voice_to_voice', float('nan')):5.0f} "
                        f"endpointing {rec.stages_ms.get('endpointing', float('nan')):4.0f} "
                        f"words {eot.words_after_ms if eot else None} rule {eot.rule if eot else None} "
                        f"p={eot.p_complete if eot else None} {rec.speculation} {q!r}",
                        flush=True,
                    )
    result = {"cpu": cpu.as_dict(), "settings": engines.tuning.settings_label()}
    for mode in modes:
        result[mode] = summary(rows[mode])
        print(f"{mode}: {json.dumps(result[mode])}", flush=True)
    first = choose_first_chunk_words(base.tts.first_chunk_words, engines.llm_ms_per_token)
    result["llm_ms_per_token"] = engines.llm_ms_per_token
    result["first_chunk_words"] = first
    print(f"CPU: {cpu.label}; {engines.tuning.settings_label()}")
    pace = engines.llm_ms_per_token or float("nan")
    print(f"LLM {pace:.1f} ms per token at warm-up; first chunk {first} words")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
