"""The speech the callers say: synthesized once with Piper, or read from a folder of WAVs.

Piper (the project's own TTS, its voice prepared by ``voice-pipeline models``:
nothing is downloaded) speaks :data:`.scenario.QUESTIONS`, the long-answer
prompts and the interruption; each is resampled with soxr to the protocol's
rate. With ``--pauses`` it also speaks :data:`.paused.PAUSED_SENTENCES` with pauses
of 0.4-1.2 s between their phrases, as people do (:func:`.paused.paused_clip`).

``--wav-dir DIR``: every ``*.wav`` is a question, except the ones named
``interrupt*.wav``, which are the interruptions (any rate; several channels are
mixed down). A question with silences of :data:`INNER_PAUSE_S` or more inside its
speech is a sentence said with pauses (recordings of real people often are): its
pauses are found on the audio, so ``--pauses`` reports on it too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np

from asr.pauses import silent_runs
from voice_pipeline.audio import read_audio, resample, to_float32
from voice_pipeline.bench.paused import PAUSED_SENTENCES, paused_clip
from voice_pipeline.bench.scenario import INTERRUPTION, LONG_PROMPTS, QUESTIONS, Clip, Speech, make_clip
from voice_pipeline.config import Config
from voice_pipeline.errors import AudioInputError

#: a question longer than this is not a question (and would stall the run)
MAX_CLIP_S = 30.0
#: a silence this long inside a recorded question is a pause mid-sentence
INNER_PAUSE_S = 0.35
#: the pauses of the paused sentences, cycled through (two per sentence)
PAUSES_S = (0.4, 0.7, 1.0, 1.2, 0.6, 0.9)


def piper_speech(
    cfg: Config, rate_hz: int, progress: Callable[[str], None], *, pauses: bool = False
) -> Speech:
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

        def synth(text: str) -> np.ndarray:
            return resample(to_float32(tts.synthesize(text)), tts.sample_rate_hz, rate_hz)

        def say_paused(i: int, phrases: tuple[str, ...]) -> Clip:
            gaps = [PAUSES_S[(2 * i + k) % len(PAUSES_S)] for k in range(len(phrases) - 1)]
            spoken = paused_clip(synth, phrases, gaps, rate_hz)
            label = " ... ".join(p.strip().rstrip(".,") for p in phrases)
            clip = make_clip(label, spoken.samples, rate_hz, spoken.phrase_ends)
            if clip is None:  # pragma: no cover  (Piper always speaks)
                raise AudioInputError(f"Piper produced no speech for {label!r}")
            return clip

        return Speech(
            questions=tuple(say(q) for q in QUESTIONS),
            long_prompts=tuple(say(q) for q in LONG_PROMPTS),
            interruptions=(say(INTERRUPTION),),
            paused=tuple(say_paused(i, p) for i, p in enumerate(PAUSED_SENTENCES)) if pauses else (),
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
        audio = np.asarray(resample(samples, rate, rate_hz), dtype=np.float32)
        pauses_at = tuple(start for start, _ in silent_runs(audio, rate_hz, INNER_PAUSE_S))
        clip = make_clip(path.name, audio, rate_hz, pauses_at)
        if clip is None:
            raise AudioInputError(f"{path}: no speech in it (silent)")
        (interruptions if path.name.lower().startswith("interrupt") else questions).append(clip)
    if not questions:
        raise AudioInputError(f"--wav-dir {folder}: no question WAV files (*.wav not named interrupt*)")
    if need_interruptions and not interruptions:
        raise AudioInputError(
            f"--wav-dir {folder}: no interrupt*.wav to interrupt replies with (or use --interrupt-share 0)"
        )
    # a recording with pauses is a question like any other (and counted as paused wherever it
    # is spoken); --pauses may pick it for more turns
    return Speech(tuple(questions), (), tuple(interruptions), tuple(q for q in questions if q.paused))
