"""Would batching pay for sessions whose Whisper decodes collide? N short-window decodes one
after another, as CTranslate2 runs them today, against one batched ``generate`` of all N.

    .venv/bin/python benchmarks/bench_asr_batch.py [--reps 5] [--sizes 1,2,3,4]
    VP_EMULATE_CPU=avx2 .venv/bin/python benchmarks/bench_asr_batch.py   # labelled emulated

Four complete questions in four espeak-ng voices, framed as the VAD delivers an utterance,
are prepared as the pipeline's fast path prepares them (:class:`asr.fast_path.WindowDecoder`:
the 50 ms lead-in, log-mel features padded to its 10 s window, its prompt, suppression list
and token budget) and decoded by the engine's own model. Per batch size N: the median time
of N ``generate`` calls in a row, of one ``generate`` of N, their ratio, and whether the
tokens are the same both ways. Prints the CPU class first; asserts nothing. Run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from speech import concat, espeak, silence

from asr import build_asr
from asr.fast_path import LEAD_IN_S, MAX_NEW_TOKENS_EXTRA, MAX_NEW_TOKENS_PER_S
from asr.window import ct2_max_length
from voice_pipeline.config import load_config
from voice_pipeline.cpu import this_cpu
from voice_pipeline.models import prepare_models

RATE = 16000
SPOKEN = (
    ("What do bees make?", "en-us+f3"),
    ("How far away is the moon?", "en-gb+m1"),
    ("What is the capital of France?", "en-us+m3"),
    ("Can you recommend a good book?", "en-us+f4"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="timings per batch size (median)")
    ap.add_argument("--sizes", default="1,2,3,4", help="batch sizes, at most 4")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if not sizes or any(not 1 <= n <= len(SPOKEN) for n in sizes) or args.reps < 1:
        ap.error(f"--sizes takes 1-{len(SPOKEN)}, --reps at least 1")
    print(f"CPU: {this_cpu().label}", flush=True)
    import ctranslate2

    config = load_config(None)
    asr = build_asr(config.asr, prepare_models(config, progress=lambda m: None).asr)
    model = asr._model  # type: ignore[attr-defined]  # the engine's WhisperModel
    decoder = asr._window  # type: ignore[attr-defined]  # its fast path (asr/fast_path.py)
    frames = round(decoder.window_s * decoder.frames_per_s)
    clips = [concat(silence(0.15), espeak(text, voice=voice), silence(0.3)) for text, voice in SPOKEN]

    def features(audio: NDArray[np.float32]) -> NDArray[np.float32]:
        mel = model.feature_extractor(np.concatenate([np.zeros(round(LEAD_IN_S * RATE), np.float32), audio]))
        padded = np.zeros((mel.shape[0], frames), np.float32)
        padded[:, : mel.shape[1] - 1] = mel[:, :-1]
        return padded

    budget = max(math.ceil(MAX_NEW_TOKENS_PER_S * len(c) / RATE) + MAX_NEW_TOKENS_EXTRA for c in clips)

    def generate(batch: list[NDArray[np.float32]]) -> list[Any]:
        return list(
            model.model.generate(
                ctranslate2.StorageView.from_array(np.stack(batch)),
                [decoder.prompt] * len(batch),
                beam_size=decoder.beam_size,
                max_length=ct2_max_length(budget, len(decoder.prompt), decoder.max_length),
                return_scores=True,
                return_no_speech_prob=True,
                suppress_blank=True,
                suppress_tokens=decoder.suppress_tokens,
            )
        )

    mels = [features(c) for c in clips]
    generate(mels[:1])  # first-run costs out of the way
    for n in sizes:
        apart: list[float] = []
        together: list[float] = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            one_by_one = [generate([m])[0] for m in mels[:n]]
            t1 = time.perf_counter()
            batched = generate(mels[:n])
            t2 = time.perf_counter()
            apart.append(t1 - t0)
            together.append(t2 - t1)
        same = all(a.sequences_ids[0] == b.sequences_ids[0] for a, b in zip(one_by_one, batched, strict=True))
        a_ms, b_ms = statistics.median(apart) * 1000, statistics.median(together) * 1000
        print(
            f"{n} decode{'s' if n > 1 else ' '}: one after another {a_ms:5.0f} ms, one batch {b_ms:5.0f} ms "
            f"(x{a_ms / b_ms:.2f}); the same tokens both ways: {'yes' if same else 'NO'}",
            flush=True,
        )


if __name__ == "__main__":
    main()
