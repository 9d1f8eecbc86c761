"""The speech the callers say: synthesized once with Piper, or read from a folder of WAVs.

Piper (the project's own TTS, its voice prepared by ``voice-pipeline models``:
nothing is downloaded) speaks :data:`.scenario.QUESTIONS`, the long-answer
prompts and the interruption; each is resampled with soxr to the protocol's
rate. ``--wav-dir DIR``: every ``*.wav`` is a question, except the ones named
``interrupt*.wav``, which are the interruptions (any rate; several channels are
mixed down).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np

from voice_pipeline.audio import read_audio, resample, to_float32
from voice_pipeline.bench.scenario import INTERRUPTION, LONG_PROMPTS, QUESTIONS, Clip, Speech, make_clip
from voice_pipeline.config import Config
from voice_pipeline.errors import AudioInputError

#: a question longer than this is not a question (and would stall the run)
MAX_CLIP_S = 30.0


def piper_speech(cfg: Config, rate_hz: int, progress: Callable[[str], None]) -> Speech:
    from tts import build_tts
    from voice_pipeline.models import prepare_models

    # the LLM is not needed to speak: "remote" skips preparing (converting) it
    no_llm = dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, engine="remote"))
    paths = prepare_models(no_llm, progress=lambda msg: None)
    progress(f"synthesizing the questions with Piper ({paths.tts.name})")
    tts = build_tts(cfg.tts, paths.tts)
    try:

        def say(text: str) -> Clip:
            pcm = to_float32(tts.synthesize(text))
            clip = make_clip(text, resample(pcm, tts.sample_rate_hz, rate_hz), rate_hz)
            if clip is None:  # pragma: no cover  (Piper always speaks)
                raise AudioInputError(f"Piper produced no speech for {text!r}")
            return clip

        return Speech(
            questions=tuple(say(q) for q in QUESTIONS),
            long_prompts=tuple(say(q) for q in LONG_PROMPTS),
            interruptions=(say(INTERRUPTION),),
        )
    finally:
        tts.close()


def wav_speech(folder: Path, rate_hz: int, need_interruptions: bool) -> Speech:
    if not folder.is_dir():
        raise AudioInputError(f"--wav-dir {folder}: not a folder")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".wav" and p.is_file())
    questions: list[Clip] = []
    interruptions: list[Clip] = []
    for path in files:
        samples, rate = read_audio(path)
        if len(samples) / rate > MAX_CLIP_S:
            raise AudioInputError(f"{path}: {len(samples) / rate:.1f} s is too long for one utterance")
        clip = make_clip(path.name, np.asarray(resample(samples, rate, rate_hz)), rate_hz)
        if clip is None:
            raise AudioInputError(f"{path}: no speech in it (silent)")
        (interruptions if path.name.lower().startswith("interrupt") else questions).append(clip)
    if not questions:
        raise AudioInputError(f"--wav-dir {folder}: no question WAV files (*.wav not named interrupt*)")
    if need_interruptions and not interruptions:
        raise AudioInputError(
            f"--wav-dir {folder}: no interrupt*.wav to interrupt replies with (or use --interrupt-share 0)"
        )
    return Speech(tuple(questions), (), tuple(interruptions))
