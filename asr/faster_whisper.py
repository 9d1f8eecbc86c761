"""``FasterWhisperASR``: Whisper (CTranslate2) through faster-whisper, on CPU.

Decode options, and why (figures from /work/shared/MEASURED.md and this module's
tests, tiny.en int8 on 2 shared cores):

``beam_size=cfg.beam_size`` (1)
    Greedy by default. Beam 5 doubled the decode time (1.0 s vs 0.5 s on a 2.6 s
    question); it is a config choice, not hard-wired.
``temperature=0.0`` only
    No temperature fallback: a low-confidence decode is not re-run up to five
    times at higher (sampled) temperatures, each re-run a full decode that can
    blow the latency budget. Decodes stay deterministic, so re-decoding the same
    audio gives the same words (what LocalAgreement compares).
``without_timestamps=True``, ``word_timestamps=False``
    One decoding pass per 30 s window, no timestamp tokens. faster-whisper's
    defaults (timestamps on) ran a second pass at 6 s (706 ms vs 401 ms) and
    hallucinated; ``word_timestamps`` together with ``without_timestamps``
    hallucinated "Thank you.".
``condition_on_previous_text=False``
    Every call decodes one whole utterance; there is no previous text to condition
    on, and conditioning is how one bad window contaminates the next.
``vad_filter=False``
    The pipeline's own VAD has already cut the utterance; a second (Silero) pass
    would cost time and could clip the pre-roll.
``no_speech_threshold=0.6``, ``log_prob_threshold=-1.0``
    faster-whisper's own values, passed explicitly because they are the silence
    guard: a window whose no-speech probability is above 0.6 *and* whose average
    token log-probability is below -1.0 is dropped. With this,
    pure silence and low-level noise decode to "" (measured: 0.5-6 s of zeros, 1-3 s
    of noise at -50 dBFS), not to "Thank you.".

Audio shorter than :data:`MIN_AUDIO_S` returns an empty :class:`Transcription`
without touching the model: no word fits in it, and Whisper would still pay for a
whole padded 30 s window.

The ~30 s window dominates the cost, so decode time is nearly flat in clip length
(about 300-400 ms for 1-6 s on 2 shared cores).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from asr.base import Transcription
from voice_pipeline.errors import AudioInputError, EngineError, MissingPackageError, ModelError

if TYPE_CHECKING:
    from voice_pipeline.config import ASRConfig

#: audio shorter than this decodes to "" without running the model
MIN_AUDIO_S = 0.1

#: files a CTranslate2 Whisper directory must hold for an offline load
#: (without tokenizer.json faster-whisper would try to download one)
REQUIRED_FILES = ("model.bin", "config.json", "tokenizer.json")

SAMPLE_RATE_HZ = 16000


def check_model_dir(model_dir: Path) -> None:
    """Raise :class:`ModelError` unless ``model_dir`` looks like a CT2 Whisper model."""
    if not model_dir.is_dir():
        raise ModelError(
            f"faster-whisper model directory {model_dir} does not exist "
            "(prepare it with: voice-pipeline models)"
        )
    missing = [name for name in REQUIRED_FILES if not (model_dir / name).is_file()]
    if missing:
        raise ModelError(
            f"faster-whisper model directory {model_dir} is incomplete: missing "
            f"{', '.join(missing)} (expected a CTranslate2 Whisper conversion)"
        )


class FasterWhisperASR:
    """Whole-utterance Whisper decoder. Thread-safe: one instance serves all sessions.

    Concurrent :meth:`transcribe` calls run in parallel up to ``cfg.num_workers``
    (CTranslate2 workers), otherwise they queue inside CTranslate2.
    """

    sample_rate_hz: int = SAMPLE_RATE_HZ

    def __init__(self, cfg: ASRConfig, model_dir: Path) -> None:
        check_model_dir(model_dir)
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise MissingPackageError("faster-whisper") from exc
        self._cfg = cfg
        self._model_dir = model_dir
        try:
            self._model: Any = WhisperModel(
                str(model_dir),
                device="cpu",
                compute_type=cfg.compute_type,
                cpu_threads=cfg.cpu_threads,
                num_workers=cfg.num_workers,
                local_files_only=True,
            )
        except Exception as exc:  # ctranslate2/tokenizers raise RuntimeError, ValueError, ...
            raise ModelError(
                f"cannot load the faster-whisper model from {model_dir}: {exc}"
            ) from exc

    def transcribe(self, audio: NDArray[np.float32]) -> Transcription:
        """Decode one utterance (mono float32 at 16 kHz). Blocking; call from a thread."""
        samples = _as_mono(audio)
        audio_s = samples.shape[0] / self.sample_rate_hz
        if audio_s < MIN_AUDIO_S:
            return Transcription(text="", words=(), audio_s=audio_s, decode_ms=0.0)
        model = self._model
        if model is None:
            raise EngineError("FasterWhisperASR is closed", retryable=False)
        cfg = self._cfg
        t0 = time.monotonic_ns()
        try:
            segments, _info = model.transcribe(
                samples,
                language=cfg.language,
                beam_size=cfg.beam_size,
                temperature=0.0,
                without_timestamps=True,
                word_timestamps=False,
                condition_on_previous_text=False,
                vad_filter=False,
                no_speech_threshold=0.6,
                log_prob_threshold=-1.0,
            )
            # segments is lazy: decoding happens while iterating
            pieces = [segment.text.strip() for segment in segments]
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"faster-whisper decode failed: {exc}", retryable=False) from exc
        decode_ms = (time.monotonic_ns() - t0) / 1e6
        text = " ".join(piece for piece in pieces if piece)
        return Transcription(
            text=text, words=tuple(text.split()), audio_s=audio_s, decode_ms=decode_ms
        )

    def close(self) -> None:
        """Release the model. Idempotent; later :meth:`transcribe` calls raise EngineError."""
        self._model = None

    def __repr__(self) -> str:
        return f"FasterWhisperASR({str(self._model_dir)!r}, {self._cfg.compute_type})"


def _as_mono(audio: NDArray[np.float32]) -> NDArray[np.float32]:
    samples = np.asarray(audio)
    if samples.ndim != 1:
        raise AudioInputError(f"ASR expects mono 1-D audio, got shape {samples.shape}")
    return np.ascontiguousarray(samples, dtype=np.float32)
