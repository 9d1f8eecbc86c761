"""Real speech for tests, synthesized at test time with espeak-ng (Debian package), or with
the Piper voice (:func:`piper_speech`).

espeak-ng is deliberately a different voice from the Piper voice the assistant
speaks with, so ASR tests do not only hear the system's own voice.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
from numpy.typing import NDArray

from voice_pipeline.audio import read_audio, resample, to_float32
from voice_pipeline.bench.paused import PausedSpeech, Recording, recorded_clip

#: recorded human speech (its README says where each file comes from)
HUMAN_DIR = Path(__file__).parent / "data" / "human"


def espeak(text: str, rate_hz: int = 16000, voice: str = "en-us+f3", wpm: int = 150) -> NDArray[np.float32]:
    """Mono float32 speech for ``text`` at ``rate_hz``."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError("espeak-ng is not installed: apt-get install espeak-ng")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "speech.wav"
        subprocess.run([exe, "-v", voice, "-s", str(wpm), "-w", str(out), text], check=True)
        audio, sr = sf.read(out, dtype="float32", always_2d=True)
    mono = audio.mean(axis=1)
    if sr != rate_hz:
        mono = soxr.resample(mono, sr, rate_hz, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def piper_speech(tts: object, text: str, rate_hz: int = 16000) -> NDArray[np.float32]:
    """``text`` in the Piper voice, at ``rate_hz``, the same audio on every run (noise off).

    Piper's noise made each rendering differ, and a test that heard one badly failed once in
    a while: "Sure," was heard "cheer" in 4 of 150 renderings, and a CI run failed on it."""
    from tts.piper import PiperTTS

    assert isinstance(tts, PiperTTS), tts
    return resample(to_float32(tts.synthesize(text, vary=False)), tts.sample_rate_hz, rate_hz)


def silence(seconds: float, rate_hz: int = 16000) -> NDArray[np.float32]:
    return np.zeros(round(seconds * rate_hz), dtype=np.float32)


def acoustic_span(speech: NDArray[np.float32]) -> tuple[int, int]:
    """The first and one past the last sample of ``speech`` louder than -50 dBFS."""
    loud = np.flatnonzero(np.abs(speech) > 0.003)
    return int(loud[0]), int(loud[-1]) + 1


def concat(*parts: NDArray[np.float32]) -> NDArray[np.float32]:
    return np.concatenate(parts).astype(np.float32)


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level Levenshtein distance / reference length, case and punctuation folded."""
    ref, hyp = normalize(reference).split(), normalize(hypothesis).split()
    if not ref:
        return 0.0 if not hyp else 1.0
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1] / len(ref)


_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


def words(text: str) -> list[str]:
    """The words of ``text``, punctuation aside (an apostrophe stays inside a word)."""
    return _WORD.findall(text)


def repeated_run(text: str, n: int = 7) -> tuple[str, ...] | None:
    """The first run of ``n`` words (case folded) that ``text`` says twice, if any."""
    said = words(text.lower())
    runs = [tuple(said[i : i + n]) for i in range(len(said) - n + 1)]
    return next((r for i, r in enumerate(runs) if r in runs[:i]), None)


def normalize(text: str) -> str:
    kept = "".join(c.lower() if c.isalnum() or c.isspace() or c == "'" else " " for c in text)
    return " ".join(kept.split())


def heard_whole(
    sentences: Sequence[tuple[Sequence[str], str, str]], words: Callable[[str], list[str]]
) -> float:
    """Each (phrases, what was heard, label): every phrase has a word in what was heard (asserted:
    none lost at a pause); prints each sentence's word error rate and returns the rate over all
    their words. ``words`` folds a text into the words compared (numerals, fillers)."""
    errors = total = 0.0
    for phrases, heard, label in sentences:
        said, ref = words(heard), words(" ".join(phrases))
        wer = word_error_rate(" ".join(ref), " ".join(said))
        errors, total = errors + wer * len(ref), total + len(ref)
        print(f"WER {wer:.0%}  {' '.join(ref)!r} -> {' '.join(said)!r}")
        for phrase in phrases:
            assert any(w in said for w in words(phrase)), f"phrase {phrase!r} lost: {label}"
    print(f"WER over {len(sentences)} sentences: {errors / total:.1%}")
    return errors / total


def recording(file: str, rate_hz: int = 16000) -> NDArray[np.float32]:
    """One of the recordings in :data:`HUMAN_DIR`, mono float32 at ``rate_hz``."""
    samples, rate = read_audio(HUMAN_DIR / file)
    return resample(samples, rate, rate_hz)


def recorded_speech(rec: Recording, pause_s: float, rate_hz: int = 16000) -> PausedSpeech:
    """``rec`` with each of the speaker's pauses made ``pause_s`` longer (:func:`recorded_clip`)."""
    return recorded_clip(recording(rec.file, rate_hz), rate_hz, rec, [pause_s] * len(rec.splits_s))
