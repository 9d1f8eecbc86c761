"""Where a Whisper decode goes, per CTranslate2 compute type: features, encoder, the whole decode.

    .venv/bin/python benchmarks/bench_asr_parts.py [--compute-types int8,int8_float32,int16,float32]
                                                   [--threads 2] [--reps 4]

Complete questions (:data:`voice_pipeline.bench.paused.COMPLETE_QUESTIONS` and two more),
spoken by espeak-ng en-us+f3 and en-gb+m1 and framed as the VAD delivers an utterance
(50 ms before, 300 ms after), are decoded by the pipeline's own engine
(:class:`asr.faster_whisper.FasterWhisperASR`, its 10 s window) for each compute type.
Per type: the log-mel features alone, the encoder alone on the padded 10 s window, the
whole ``transcribe`` (features, encoder and greedy decoding), medians over every clip and
repetition, and the word error rate. A type this CPU cannot run is reported, not fatal.
Prints the CPU class first; asserts nothing. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from speech import espeak, word_error_rate

from asr import build_asr
from voice_pipeline.bench.paused import COMPLETE_QUESTIONS
from voice_pipeline.config import load_config
from voice_pipeline.cpu import this_cpu
from voice_pipeline.errors import ModelError
from voice_pipeline.models import prepare_models

RATE = 16000
QUESTIONS = (*COMPLETE_QUESTIONS, "Can you recommend a good book?", "How far away is the moon?")
VOICES = ("en-us+f3", "en-gb+m1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compute-types", default="int8,int8_float32,int16,float32")
    ap.add_argument("--threads", type=int, default=2, help="CTranslate2 threads")
    ap.add_argument("--reps", type=int, default=4)
    args = ap.parse_args()
    print(f"CPU: {this_cpu().label}; {args.threads} ASR threads", flush=True)
    import ctranslate2

    print(f"CTranslate2 compute types on this CPU: {sorted(ctranslate2.get_supported_compute_types('cpu'))}")
    base = load_config(None)
    paths = prepare_models(base, progress=lambda m: None)
    clips = [
        (q, np.concatenate([np.zeros(800, np.float32), espeak(q, voice=v), np.zeros(4800, np.float32)]))
        for q in QUESTIONS
        for v in VOICES
    ]
    for compute_type in args.compute_types.split(","):
        cfg = dataclasses.replace(base.asr, cpu_threads=args.threads, compute_type=compute_type)
        try:
            asr = build_asr(cfg, paths.asr)
        except ModelError as exc:
            print(f"{compute_type:13} not available: {exc}", flush=True)
            continue
        asr.transcribe(np.zeros(RATE, np.float32))  # first-run costs out of the way
        model = asr._model  # type: ignore[attr-defined]  # the engine's WhisperModel
        decoder = asr._window  # type: ignore[attr-defined]  # its fast path (asr/fast_path.py)
        frames = round(decoder.window_s * decoder.frames_per_s)  # the window the engine decodes in
        features, encoder, whole, wers = [], [], [], []
        for rep in range(args.reps):
            for text, audio in clips:
                t0 = time.perf_counter()
                mel = model.feature_extractor(audio)
                t1 = time.perf_counter()
                padded = np.zeros((1, mel.shape[0], frames), np.float32)
                padded[0, :, : mel.shape[1] - 1] = mel[:, :-1]
                window = ctranslate2.StorageView.from_array(padded)
                t2 = time.perf_counter()
                model.model.encode(window, to_cpu=False)
                t3 = time.perf_counter()
                result = asr.transcribe(audio)
                t4 = time.perf_counter()
                features.append(t1 - t0)
                encoder.append(t3 - t2)
                whole.append(t4 - t3)
                if rep == 0:
                    wers.append(word_error_rate(text, result.text))
        ms = [round(statistics.median(x) * 1000, 1) for x in (features, encoder, whole)]
        print(
            f"{compute_type:13} features {ms[0]:5.1f} ms  "
            f"encoder ({decoder.window_s:g} s window) {ms[1]:5.1f} ms  "
            f"whole decode p50 {ms[2]:5.1f} ms, max {max(whole) * 1000:5.0f} ms  "
            f"WER {np.mean(wers):.1%} ({len(clips)} clips x {args.reps})",
            flush=True,
        )


if __name__ == "__main__":
    main()
