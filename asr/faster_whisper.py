"""``FasterWhisperASR``: Whisper (CTranslate2) through faster-whisper, on CPU.

Two paths, one answer (:meth:`FasterWhisperASR.transcribe`):

**Fast path** (:meth:`~FasterWhisperASR.transcribe_window`), audio up to
``window_s - 1`` s (``window_s`` = 10 by default, so up to 9 s). faster-whisper pads
every input to Whisper's 30 s window and the encoder dominates; here the log-mel
features come from the model's own extractor (its last frame dropped, as
``generate_segments`` does), are zero-padded (``pad_or_trim``'s value) to a 10 s
window of 1000 frames, and go to ``ctranslate2.models.Whisper.generate`` directly,
with faster-whisper's settings: prompt ``<|startoftranscript|> <|notimestamps|>`` for
an English-only model (language and ``<|transcribe|>`` added for a multilingual one),
``suppress_blank``, ``suppress_tokens=[-1]`` resolved by ``get_suppressed_tokens``,
``beam_size`` from the config. What comes back is checked, and anything doubtful
goes to the full path instead:

* no-speech probability > 0.6 and average log-probability < -1.0, or a text without
  a word (Whisper's "." for silence): silence, "" (:func:`judge_window`);
* no-speech probability > 0.6 but confident words: the full window judges (silence
  sits on the -1.0 line: 3 s of zeros decoded "." at -0.99 here, and 1 s at -0.97
  with AVX2 int8 kernels, so confidence alone cannot tell silence on every CPU);
* average log-probability < -1.0: unsure, the full window judges;
* :func:`looks_degenerate`: the token budget ran out (``8/s * audio + 10`` tokens,
  so a loop is cut early), more than ``5/s * audio + 3`` words, or an n-gram
  repeated back to back (a window only as long as the audio loops: WER 117-412 %,
  measured on a 2-core EPYC in 2026-11).

A 50 ms lead-in of silence goes before the audio: a clip whose speech starts at
its first sample was misheard more often in the short window ("What is the capital
of Friends?"; 12-question set 19.8 % vs 18.1 % WER for the full path without it).
Lead-ins of 0.05-0.2 s all helped, by similar amounts (a few words apart);
0.05 s had the lowest WER averaged over the three sets below.

Measured (tiny.en int8, beam 1, 2 shared cores, espeak-ng en-us+f3 150 wpm unless
noted; WER over all words, case and punctuation folded; "framed" = 150 ms of silence
before, 300 ms after, as the VAD delivers an utterance):

=====================================  ==============  ==============
set                                    fast path WER   full path WER
=====================================  ==============  ==============
12 questions, 0.9-7.1 s (116 words)    12.1 %          18.1 %
same, framed                           12.1 %          14.7 %
32 sentences x f3/m3 x bare/framed     12.6 %          14.9 %
24 held-out, same 4 conditions         14.6 %          16.4 %
=====================================  ==============  ==============

Median decode on the 12-question set 121-157 ms on the fast path vs 341-477 ms on
the full path (four runs; the spread is other load on the machine). By clip length,
under heavy load (1 / 3 / 6 / 9 s): fast 136-192 / 113-180 / 200-344 / 232-362 ms,
full 552-1210 / 633-1382 / 606-1289 / 648-1723 ms; about 3x in every run. 3 of 248
clips fell back (low confidence or high no-speech probability). A fallback costs
the fast attempt on top of the full decode: a decode forced to run into its token
budget (end-of-text suppressed) added 0.2-0.5 s. The two paths differ in single
words here and there, in both directions; on these sets the fast one was slightly
better, not worse.

Shorter windows for shorter clips: measured, not the default. ``windows=(4, 5, 6, 8)``
decodes a clip in the smallest window leaving it 1 s of room
(:func:`asr.window.choose_window`; a rejected decode tries the 10 s window before the
30 s one). The encoder is a small part of a short decode (10 s / 4 s window: 35 / 13 ms
on AVX-512 BF16, 69 / 24 ms on emulated AVX2), and about one decode in five in a 4-8 s window
was rejected by the guards, mostly a loop run into its token budget (none got through),
which costs a second decode. So the median gained 10-30 ms, the p90 lost 100-190 ms and
the WER 0.8-1.3 points (held-out sentences: 1.6-2.3). Measured 2026-12-01 on a 2-core
AMD EPYC (shared, load 3-4) by ``benchmarks/bench_asr_window.py`` (AVX2: the same with
``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 CT2_FORCE_CPU_ISA=AVX2`` and
``--voices en-us+f3 piper``); 12 questions, 32 sentences and 24 held-out ones, espeak-ng
en-us+f3/m3, en-gb+m1 and Piper, bare and framed, 0.6-6.0 s (544 clips; AVX2 272);
decode ms p50 / p90 with any second decode, WER:

=================================  ===  ========================  ==========================
rule                               thr  AVX-512 BF16              AVX2, emulated on AVX-512
=================================  ===  ========================  ==========================
10 s only (the default)            1    154 / 263 ms, 13.3 %      188 / 263 ms, 12.2 %
"                                  2    157 / 265 ms, 13.3 %      191 / 253 ms, 12.2 %
smallest with 1 s room, then 10 s  1    141 / 394 ms, 14.6 %      158 / 434 ms, 13.3 %
"                                  2    143 / 401 ms, 14.6 %      162 / 443 ms, 13.3 %
room max(1 s, 50 %), then 10 s     1    144 / 367 ms, 14.1 %      162 / 426 ms, 13.1 %
"                                  2    149 / 381 ms, 14.1 %      169 / 426 ms, 13.1 %
smallest with 1 s room, then 30 s  1    141 / 657 ms, 14.6 %      158 / 802 ms, 13.0 %
=================================  ===  ========================  ==========================

Decode options of the full path (faster-whisper's ``transcribe``), and why (figures
measured on the project's 2-core machines, and this module's tests):

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
    pure silence and low-level noise decode to "" (measured: 0.5-7 s of zeros, 1-3 s
    of noise at -50 dBFS), not to "Thank you.". 8 s and more of digital zeros
    decode to "you" on this path (not on the fast path, which takes up to 9 s).
``chunk_length`` is never passed
    It did not make decoding faster, and it overwrites the shared feature
    extractor's window size, which would race between threads.

Audio shorter than :data:`MIN_AUDIO_S` returns an empty :class:`Transcription`
without touching the model: no word fits in it.

The 30 s window dominates the full path's cost, so its decode time is nearly flat in
clip length (about 300-400 ms for 1-6 s on 2 quiet shared cores); the fast path's
grows with the tokens decoded (see above).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from asr.base import Transcription
from asr.window import (
    LOG_PROB_THRESHOLD,
    NO_SPEECH_THRESHOLD,
    WINDOW_MARGIN_S,
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

#: files a CTranslate2 Whisper directory must hold for an offline load
#: (without tokenizer.json faster-whisper would try to download one)
REQUIRED_FILES = ("model.bin", "config.json", "tokenizer.json")

SAMPLE_RATE_HZ = 16000

#: the largest short window (the engine's ``window_s``), seconds; shorter clips decode
#: in a shorter one (:func:`asr.window.choose_window`)
DEFAULT_WINDOW_S = 10.0
#: silence the fast path puts before the audio: speech starting at the very first
#: sample is misheard more often in a short window (see the module docstring)
LEAD_IN_S = 0.05

#: the fast path's token budget, ``ceil(MAX_NEW_TOKENS_PER_S * audio_s) + MAX_NEW_TOKENS_EXTRA``:
#: above the word limit (~1.3 tokens a word), small enough that a loop ends early
MAX_NEW_TOKENS_PER_S = 8.0
MAX_NEW_TOKENS_EXTRA = 10


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

    def __init__(
        self,
        cfg: ASRConfig,
        model_dir: Path,
        *,
        window_s: float | None = DEFAULT_WINDOW_S,
        windows: Sequence[float] = (),
    ) -> None:
        """``window_s``: the fast path's largest window (None = always the full 30 s
        window); ``windows``: shorter ones a short clip may decode in
        (:func:`asr.window.choose_window`); ``()``, the default, = always ``window_s``
        (the shorter windows were measured and did not pay: see the module docstring)."""
        if window_s is not None and not 2.0 <= window_s <= 30.0:
            raise ConfigError(f"asr: window_s must be between 2 and 30 seconds, got {window_s}")
        if any(not 1.0 <= w <= 30.0 for w in windows):
            raise ConfigError(f"asr: windows must be between 1 and 30 seconds, got {list(windows)}")
        self._windows = tuple(sorted(windows))
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
            raise ModelError(
                f"cannot load the faster-whisper model from {model_dir}: {exc}"
            ) from exc
        self._window: _Window | None = (
            None
            if window_s is None
            else _Window(self._model, language=cfg.language, beam_size=cfg.beam_size, window_s=window_s)
        )

    @property
    def window_max_s(self) -> float:
        """The longest audio the fast path takes, seconds (0 when it is off)."""
        window = self._window
        return 0.0 if window is None else window.max_audio_s

    def transcribe(self, audio: NDArray[np.float32]) -> Transcription:
        """Decode one utterance (mono float32 at 16 kHz). Blocking; call from a thread.

        The short-window fast path first (audio up to :attr:`window_max_s`), the full
        30 s window when the audio is longer or the fast decode is unusable.
        """
        t0 = time.monotonic_ns()
        result = self.transcribe_window(audio)
        if result is not None:
            return result
        full = self.transcribe_full(audio)
        return dataclasses.replace(full, decode_ms=(time.monotonic_ns() - t0) / 1e6)

    def choose_window(self, audio_s: float) -> float | None:
        """The window ``audio_s`` seconds of audio decode in on the fast path, None = none."""
        window = self._window
        if window is None:
            return None
        return choose_window(audio_s, window.window_s, windows=self._windows)

    def transcribe_window(
        self, audio: NDArray[np.float32], *, window_s: float | None = None
    ) -> Transcription | None:
        """The fast path alone: features padded to a short window, one ``generate``.

        The window is :meth:`choose_window`'s unless ``window_s`` forces one (a
        benchmark's choice: no margin is checked then, only that the audio fits).
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
            text = window.decode(model, samples, audio_s, chosen)
            if text is None and window_s is None and chosen < window.window_s:
                # a short window's decode the guards reject (mostly a loop): the largest
                # window decodes it before the full 30 s one is asked
                text = window.decode(model, samples, audio_s, window.window_s)
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
                no_speech_threshold=NO_SPEECH_THRESHOLD,
                log_prob_threshold=LOG_PROB_THRESHOLD,
            )
            # segments is lazy: decoding happens while iterating
            pieces = [segment.text.strip() for segment in segments]
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"faster-whisper decode failed: {exc}", retryable=False) from exc
        text = " ".join(piece for piece in pieces if piece)
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


# ------------------------------------------------------------ the fast path


class _Window:
    """The short-window decode: prompt, suppression list and shapes, fixed at load.

    Immutable after ``__init__``, so one instance serves concurrent calls (the
    feature extractor is only read: it is called without ``chunk_length``, which
    would overwrite its window size).
    """

    def __init__(self, model: Any, *, language: str, beam_size: int, window_s: float) -> None:
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        extractor = model.feature_extractor
        self.frames_per_s: float = extractor.sampling_rate / extractor.hop_length
        self.window_s = window_s
        self.max_audio_s = window_s - WINDOW_MARGIN_S
        self.sample_rate_hz: int = extractor.sampling_rate
        self.beam_size = beam_size
        multilingual = bool(model.model.is_multilingual)
        # as WhisperModel.transcribe: an English-only model always decodes "en"
        tokenizer = Tokenizer(
            model.hf_tokenizer,
            multilingual,
            task="transcribe",
            language=language if multilingual else "en",
        )
        self.tokenizer = tokenizer
        # get_prompt(without_timestamps=True), no previous text: sot [lang transcribe] notimestamps
        self.prompt: list[int] = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        # faster-whisper's default suppress_tokens=[-1]: the model's non-speech symbols
        # plus the task and special tokens
        self.suppress_tokens: list[int] = list(get_suppressed_tokens(tokenizer, [-1]))
        self.max_length: int = model.max_length  # the decoder's 448 positions

    def decode(
        self, model: Any, samples: NDArray[np.float32], audio_s: float, window_s: float
    ) -> str | None:
        """The text, "" for silence, or None when the full window should decode instead."""
        import ctranslate2

        lead_in = np.zeros(round(LEAD_IN_S * self.sample_rate_hz), dtype=np.float32)
        features = model.feature_extractor(np.concatenate([lead_in, samples]))
        # as generate_segments: the last frame (from the extractor's 160-sample tail
        # padding) is not content; the rest is padded with zeros like pad_or_trim does
        content = features[:, : features.shape[-1] - 1]
        frames = max(round(window_s * self.frames_per_s), content.shape[1])
        padded = np.zeros((1, content.shape[0], frames), dtype=np.float32)
        padded[0, :, : content.shape[1]] = content
        max_new_tokens = min(
            math.ceil(MAX_NEW_TOKENS_PER_S * audio_s) + MAX_NEW_TOKENS_EXTRA,
            self.max_length // 2 - len(self.prompt),
        )
        result = model.model.generate(
            ctranslate2.StorageView.from_array(padded),
            [self.prompt],
            beam_size=self.beam_size,
            patience=1.0,
            length_penalty=1.0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            max_length=ct2_max_length(max_new_tokens, len(self.prompt), self.max_length),
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=self.suppress_tokens,
        )[0]
        tokens: list[int] = result.sequences_ids[0]
        # faster-whisper's recovery of the average log-probability (length_penalty 1)
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        return judge_window(
            str(self.tokenizer.decode(tokens)).strip(),
            audio_s,
            no_speech_prob=float(result.no_speech_prob),
            avg_logprob=float(avg_logprob),
            hit_max_length=len(tokens) >= max_new_tokens,
        )
