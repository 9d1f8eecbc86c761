"""``FasterWhisperASR``: Whisper (CTranslate2) through faster-whisper, on CPU.

Two paths, one answer (:meth:`FasterWhisperASR.transcribe`):

**Fast path** (:meth:`~FasterWhisperASR.transcribe_window`), audio up to
``window_s - 1`` s (9 s by default): the features padded to a 10 s window instead of
Whisper's 30 s, one ``generate`` call, and what comes back checked; anything doubtful
(low confidence, a loop) goes to the full path. About 3x faster than the full path on
clips of 1-9 s, and no worse in WER on the project's sets. The decode, its guards and
the figures that chose them are in :mod:`asr.fast_path` (the decode) and
:mod:`asr.window` (the pure decisions).

**Full path** (:meth:`~FasterWhisperASR.transcribe_full`): faster-whisper's own
``transcribe`` on the 30 s window, for longer audio and for the fast path's rejects; its
decode options, and why, are in :mod:`asr.full_path`.

Audio shorter than :data:`MIN_AUDIO_S` returns an empty :class:`Transcription`
without touching the model: no word fits in it.

The 30 s window dominates the full path's cost, so its decode time is nearly flat in
clip length (about 300-400 ms for 1-6 s on 2 quiet shared cores); the fast path's
grows with the tokens decoded (see :mod:`asr.fast_path`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from asr.base import MoreAudio, Transcription
from asr.fast_path import LEAD_IN_S, WindowDecoder, encoder_ms
from asr.full_path import decode_full
from asr.window import (
    LOG_PROB_THRESHOLD,
    NO_SPEECH_THRESHOLD,
    WINDOW_MARGIN_S,
    choose_short_windows,
    choose_window,
    ct2_max_length,
    has_repeat_loop,
    judge_window,
    looks_degenerate,
)
from voice_pipeline.errors import (
    AudioInputError,
    ClosedError,
    ConfigError,
    EngineError,
    MissingPackageError,
    ModelError,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from voice_pipeline.config import ASRConfig

__all__ = [
    "DEFAULT_WINDOW_S",
    "LOG_PROB_THRESHOLD",
    "NO_SPEECH_THRESHOLD",
    "WINDOW_MARGIN_S",
    "FasterWhisperASR",
    "check_model_dir",
    "choose_window",
    "ct2_max_length",
    "has_repeat_loop",
    "judge_window",
    "looks_degenerate",
]

#: audio shorter than this decodes to "" without running the model
MIN_AUDIO_S = 0.1
#: a rejected pause decode is retried in the short window with the pause that came since
#: when there is at least this much of it (see :meth:`FasterWhisperASR.transcribe`)
MORE_AUDIO_MIN_S = 0.1

#: files a CTranslate2 Whisper directory must hold for an offline load
#: (without tokenizer.json faster-whisper would try to download one)
REQUIRED_FILES = ("model.bin", "config.json", "tokenizer.json")

SAMPLE_RATE_HZ = 16000

#: the largest short window (the engine's ``window_s``), seconds; shorter clips decode
#: in a shorter one (:func:`asr.window.choose_window`)
DEFAULT_WINDOW_S = 10.0


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
    (CTranslate2 workers), otherwise they wait for their turn here.
    """

    sample_rate_hz: int = SAMPLE_RATE_HZ

    def __init__(
        self,
        cfg: ASRConfig,
        model_dir: Path,
        *,
        window_s: float | None = DEFAULT_WINDOW_S,
        windows: Sequence[float] | None = None,
        pad_silence: bool | None = None,
    ) -> None:
        """``window_s``: the fast path's largest window (None = always the full 30 s
        window); ``windows``: shorter ones a short clip may decode in
        (:func:`asr.window.choose_window`); None = ``cfg.short_windows``' choice, timed at load
        (:func:`asr.window.choose_short_windows`; measured in :mod:`asr.fast_path`), ``()`` = none;
        ``pad_silence``: the window's room after the audio is silence, as Whisper's reference
        pads, not zeros in feature units, as faster-whisper pads; None = silence with shorter
        windows, zeros without (measured: see :mod:`asr.fast_path`)."""
        if window_s is not None and not 2.0 <= window_s <= 30.0:
            raise ConfigError(f"asr: window_s must be between 2 and 30 seconds, got {window_s}")
        if windows is not None and any(not 1.0 <= w <= 30.0 for w in windows):
            raise ConfigError(f"asr: windows must be between 1 and 30 seconds, got {list(windows)}")
        check_model_dir(model_dir)
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise MissingPackageError("faster-whisper") from exc
        from voice_pipeline.tuning import tuned_asr

        cfg = tuned_asr(cfg)  # cpu_threads 0 = chosen for the machine
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
            raise ModelError(f"cannot load the faster-whisper model from {model_dir}: {exc}") from exc
        #: the 10 s window's encoder, ms, timed at load for ``short_windows: auto`` (else None)
        timed = windows is None and cfg.short_windows == "auto"
        self.encoder_ms = encoder_ms(self._model, window_s) if timed and window_s is not None else None
        if windows is None:
            windows = choose_short_windows(cfg.short_windows, self.encoder_ms)
        if self.encoder_ms is not None:  # only "auto" times it
            log.info("asr: the 10 s window's encoder took %s ms; shorter windows: %s",
                     round(self.encoder_ms), list(windows) or "none")  # fmt: skip
        self.windows: tuple[float, ...] = tuple(sorted(windows))
        silent = bool(self.windows) if pad_silence is None else pad_silence
        #: one decode per CTranslate2 worker at a time, taken here (not in CTranslate2's queue) so a
        #: decode that waited behind another can learn that it is void before it runs
        self._turns = threading.Semaphore(self.workers)
        self._window: WindowDecoder | None = None
        if window_s is not None:
            self._window = WindowDecoder(
                self._model,
                language=cfg.language,
                beam_size=cfg.beam_size,
                window_s=window_s,
                pad_silence=silent,
            )

    @property
    def workers(self) -> int:
        """Decodes that may run at once (``asr.num_workers``, as chosen for the machine)."""
        return max(1, self._cfg.num_workers)

    @property
    def window_max_s(self) -> float:
        """The longest audio the fast path takes, seconds (0 when it is off)."""
        window = self._window
        return 0.0 if window is None else window.max_audio_s

    def transcribe(self, audio: NDArray[np.float32], *, more: MoreAudio | None = None) -> Transcription:
        """Decode one utterance (mono float32 at 16 kHz). Blocking; call from a thread.

        The short-window fast path first (audio up to :attr:`window_max_s`), the full 30 s
        window when the audio is longer or the fast decode is unusable.

        ``more`` (the pause's decode, :class:`asr.base.ASREngine`): when the fast path rejects
        ``audio`` and ``more()`` brings at least :data:`MORE_AUDIO_MIN_S` of the pause after it,
        that longer audio is decoded in the short window before the full window is asked; ``more()``
        is also asked when the decode gets its turn, after each short-window encoder and before
        the full window (``DecodeUnwanted``: the speaker went on, the decode stops). The VAD's first silent
        frame can come before the last word's soft ending ("make" in "What do bees make?"): cut
        there, the short window heard "What do these may?" (no-speech 0.61-0.73), and the full
        window took 1.3-1.5 s alone on a 2-core AVX2 EPYC. With 0.3 s of the pause added, 10 of
        10 such cuts were trusted in the short window (9 of 10 with 0.1-0.2 s), each decode
        ~0.43 s, and their word error rate was the full window's."""
        with self._turns:
            if more is not None:
                more()  # DecodeUnwanted: the speaker went on while this decode waited for its turn
            return self._transcribe(_as_mono(audio), more)

    def _transcribe(self, samples: NDArray[np.float32], more: MoreAudio | None) -> Transcription:
        t0 = time.monotonic_ns()
        result = self.transcribe_window(samples, wanted=more)
        if result is not None:
            return result
        later = self._more_audio(samples, more)
        if later is not None:
            result = self.transcribe_window(later, wanted=more)
            if result is not None:
                cut_s, total_ms = samples.shape[0] / self.sample_rate_hz, (time.monotonic_ns() - t0) / 1e6
                log.info(
                    "asr: the short window's decode of %.1f s was rejected; with the %.2f s of "
                    "pause since, it was trusted (%.0f ms in all)", cut_s, result.audio_s - cut_s, total_ms,
                )  # fmt: skip
                return dataclasses.replace(result, decode_ms=total_ms)
            samples = later
        if more is not None and self._fits_window(samples.shape[0] / self.sample_rate_hz):
            more()  # raises DecodeUnwanted if the speaker went on: the full window costs ~1 s
        fast_ms = (time.monotonic_ns() - t0) / 1e6
        full = self.transcribe_full(samples)
        audio_s = full.audio_s
        if self._fits_window(audio_s):  # the guards rejected it
            log.info(
                "asr: the short window's decode of %.1f s was rejected after %.0f ms; "
                "the full 30 s window took %.0f ms",
                audio_s, fast_ms, full.decode_ms,
            )  # fmt: skip
        return dataclasses.replace(full, decode_ms=(time.monotonic_ns() - t0) / 1e6)

    def transcribe_partial(self, audio: NDArray[np.float32]) -> Transcription | None:
        """A partial: the fast path alone, None when its guards reject the decode.

        A partial hears the utterance cut anywhere, often mid-word, and the short window's
        decode of such a cut is often unsure: 12 of 58 cuts of the bench's Piper questions
        (every 150 ms) were rejected, and the full 30 s window then took 290-380 ms alone
        (AMD EPYC, AVX-512 BF16) and 600-900 ms beside four sessions' work, while every
        speculative decode on the engine queued behind it. A partial is a preview: it is
        skipped instead. Audio longer than the short window decodes on the full path, as in
        :meth:`transcribe`. Always in the largest short window: partials are compared with one
        another (LocalAgreement) and timed at warm-up, where a window that grows with the
        utterance (:attr:`windows`) would change what they hear ("weather" or "winner").
        """
        with self._turns:
            return self._transcribe_partial(_as_mono(audio))

    def _transcribe_partial(self, samples: NDArray[np.float32]) -> Transcription | None:
        audio_s = samples.shape[0] / self.sample_rate_hz
        largest = self._window.window_s if self._window is not None and self._fits_window(audio_s) else None
        result = self.transcribe_window(samples, window_s=largest)
        if result is not None:
            return result
        if not self._fits_window(audio_s):
            return self.transcribe_full(samples)  # too long for the short window, as in transcribe
        log.info("asr: a partial of %.1f s was skipped: the short window's decode was rejected", audio_s)
        return None

    def _more_audio(self, samples: NDArray[np.float32], more: MoreAudio | None) -> NDArray[np.float32] | None:
        """The longer audio a rejected short-window decode of ``samples`` is retried with,
        None when there is none (no ``more``, too little of it, or ``samples`` never fit)."""
        if more is None or not self._fits_window(samples.shape[0] / self.sample_rate_hz):
            return None
        later = more()
        if later is None:
            return None
        later = _as_mono(later)
        if later.shape[0] - samples.shape[0] < MORE_AUDIO_MIN_S * self.sample_rate_hz:
            return None
        return later

    def _fits_window(self, audio_s: float) -> bool:
        """Whether the fast path takes ``audio_s`` seconds (a None from it was then a rejection)."""
        return audio_s + LEAD_IN_S <= self.window_max_s

    def choose_window(self, audio_s: float) -> float | None:
        """The window ``audio_s`` seconds of audio decode in on the fast path, None = none."""
        window = self._window
        if window is None:
            return None
        return choose_window(audio_s, window.window_s, windows=self.windows)

    def transcribe_window(
        self,
        audio: NDArray[np.float32],
        *,
        window_s: float | None = None,
        wanted: Callable[[], object] | None = None,
    ) -> Transcription | None:
        """The fast path alone: features padded to a short window, encoded, then decoded.

        The window is :meth:`choose_window`'s unless ``window_s`` forces one (a
        benchmark's choice: no margin is checked then, only that the audio fits).
        ``wanted`` is asked after the encoder (:meth:`asr.fast_path.WindowDecoder.decode`):
        it raises :class:`asr.base.DecodeUnwanted` to skip the decoder.
        None when the audio is longer than the window (or :attr:`window_max_s`), when
        the fast path is off, or when the decode is unusable (:func:`looks_degenerate`,
        low confidence); :meth:`transcribe` then decodes the full window.
        """
        samples = _as_mono(audio)
        audio_s = samples.shape[0] / self.sample_rate_hz
        if audio_s < MIN_AUDIO_S:
            return _empty(audio_s)
        window = self._window
        if window is None:
            return None
        chosen = self.choose_window(audio_s) if window_s is None else window_s
        if chosen is None or audio_s + LEAD_IN_S > chosen:
            return None
        model = self._live_model()
        t0 = time.monotonic_ns()
        try:
            text = window.decode(model, samples, audio_s, chosen, wanted=wanted)
            if text is None and window_s is None and chosen < window.window_s:
                # a short window's decode the guards reject (mostly a loop): the largest
                # window decodes it before the full 30 s one is asked
                text = window.decode(model, samples, audio_s, window.window_s, wanted=wanted)
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"faster-whisper decode failed: {exc}", retryable=False) from exc
        if text is None:
            return None
        return _transcription(text, audio_s, (time.monotonic_ns() - t0) / 1e6)

    def transcribe_full(self, audio: NDArray[np.float32]) -> Transcription:
        """The full path alone: faster-whisper's ``transcribe`` on its 30 s window."""
        samples = _as_mono(audio)
        audio_s = samples.shape[0] / self.sample_rate_hz
        if audio_s < MIN_AUDIO_S:
            return _empty(audio_s)
        model = self._live_model()
        t0 = time.monotonic_ns()
        try:
            text = decode_full(model, samples, language=self._cfg.language, beam_size=self._cfg.beam_size)
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"faster-whisper decode failed: {exc}", retryable=False) from exc
        return _transcription(text, audio_s, (time.monotonic_ns() - t0) / 1e6)

    def _live_model(self) -> Any:
        model = self._model
        if model is None:
            raise ClosedError("FasterWhisperASR")
        return model

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


def _empty(audio_s: float) -> Transcription:
    return Transcription(text="", words=(), audio_s=audio_s, decode_ms=0.0)


def _transcription(text: str, audio_s: float, decode_ms: float) -> Transcription:
    return Transcription(text=text, words=tuple(text.split()), audio_s=audio_s, decode_ms=decode_ms)
