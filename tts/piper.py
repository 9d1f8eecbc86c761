"""Piper TTS engine (piper-tts >= 1.3 API, tested with 1.8).

The ONNX session is built here rather than by ``PiperVoice.load`` so the graph can be
rewritten (``tts.conv2d``: its 1-D convolutions as 2-D ones, :mod:`tts.conv2d`) and the thread
pools set: ``intra_op_num_threads = cfg.threads``, ``inter_op = 1``,
sequential execution, no spin-waiting. Measured on 2 shared cores: 1 intra-op
thread stays ~100 ms per short sentence while the LLM decodes, 2 threads
degrade to ~190 ms.

Piper pads every sentence with 140-300 ms of near-silence, which makes speech
spoken clause by clause drag; each chunk is trimmed to at most
``cfg.max_trailing_silence_ms`` of trailing and :data:`LEADING_SILENCE_MS` of
leading silence (frames below :data:`SILENCE_FLOOR_DBFS` count as silence).

A reply's first chunk can be synthesized head first (``tts.head_first``,
:meth:`PiperTTS.synthesize_head`): the voice's graph is also loaded as its two halves, the
front and the HiFi-GAN decoder (:mod:`tts.head_first`), and the first ~0.28 s is decoded
and sent before the rest.

Thread safety: ``InferenceSession.run`` may be called from several threads at
once (onnxruntime guarantees it), and Piper guards its espeak-ng phonemizer with
a module lock, so :meth:`PiperTTS.synthesize` needs no lock of its own.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from tts.base import HeadFirst
from tts.head_first import HEAD_FRAMES, HeadDecoder, head_gain, split_voice, worth_cutting
from tts.text import is_speakable, strip_symbols
from voice_pipeline.errors import ClosedError, MissingPackageError, ModelError

if TYPE_CHECKING:
    from piper.voice import PiperVoice

    from voice_pipeline.config import TTSConfig

__all__ = [
    "LEADING_SILENCE_MS",
    "SILENCE_FLOOR_DBFS",
    "PiperTTS",
    "conv2d_model",
    "trim_silence",
    "voice_name",
]

#: silence kept before the first voiced frame of each chunk
LEADING_SILENCE_MS = 5
#: a frame whose RMS is below this level (relative to int16 full scale) is silence
SILENCE_FLOOR_DBFS = -50.0
_FRAME_MS = 5
_FADE_MS = 2
log = logging.getLogger(__name__)
#: what the voice's reference peak is measured on (:mod:`tts.head_first`), noise off
CALIBRATION = ("Hello there.", "The capital of France is Paris.", "Sure, here's a simple guide.")
#: longer than any chunk: no silence trimmed at that edge
_NO_TRIM_MS = 3_600_000


def voice_name(voice_path: str | Path) -> str:
    """The voice's name in a Piper file name ``<lang>_<REGION>-<name>-<quality>.onnx``:
    ``en_US-joe-medium.onnx`` -> ``joe`` (else the file's stem)."""
    stem = Path(voice_path).name.removesuffix(".onnx")
    parts = stem.split("-")
    return parts[1] if len(parts) == 3 else stem


class PiperTTS:
    """A Piper voice: ``synthesize(text)`` -> int16 mono PCM at ``sample_rate_hz``."""

    def __init__(self, cfg: TTSConfig, voice_path: Path) -> None:
        voice_path = Path(voice_path)
        config_path = voice_path.with_name(voice_path.name + ".json")
        if not voice_path.is_file():
            raise ModelError(f"Piper voice not found: {voice_path}")
        if not config_path.is_file():
            raise ModelError(
                f"Piper voice config not found: {config_path} (it must sit beside {voice_path.name})"
            )
        if cfg.threads < 1:
            raise ModelError(f"tts.threads must be >= 1, got {cfg.threads}")
        try:
            import onnxruntime as ort
            from piper.config import PiperConfig, SynthesisConfig
            from piper.voice import PiperVoice
        except ImportError as exc:
            raise MissingPackageError("piper-tts") from exc

        try:
            voice_config = PiperConfig.from_dict(json.loads(config_path.read_text("utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelError(f"invalid Piper voice config {config_path}: {exc}") from exc

        options = ort.SessionOptions()
        options.intra_op_num_threads = cfg.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        model: str | bytes = conv2d_model(voice_path) if cfg.conv2d else str(voice_path)
        try:
            session = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise ModelError(f"cannot load Piper voice {voice_path}: {exc}") from exc

        self._voice: PiperVoice | None = PiperVoice(session=session, config=voice_config)
        self.voice = voice_name(voice_path)
        self.sample_rate_hz: int = int(voice_config.sample_rate)
        self._max_trailing_ms = max(0, cfg.max_trailing_silence_ms)
        c = voice_config
        self._scales = np.array([c.noise_scale, c.length_scale, c.noise_w_scale], dtype=np.float32)
        self._steady = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
        self._head: HeadDecoder | None = None
        self._reference_peak = 1.0
        if cfg.head_first and c.num_speakers <= 1:
            self._head = _head_decoder(
                model,
                lambda graph: ort.InferenceSession(
                    graph, sess_options=options, providers=["CPUExecutionProvider"]
                ),
            )
            if self._head is not None:
                self._reference_peak = self._measure_reference_peak()
        self.synthesize("Hello.")  # warm-up: espeak-ng init and first ORT run (~+60 ms)

    def synthesize(self, text: str, *, vary: bool = True) -> NDArray[np.int16]:
        """Mono int16 audio for ``text``; empty if it has nothing to say. Blocking; thread-safe.

        Piper samples noise on every call (the voice's ``noise_scale`` and ``noise_w``), so
        the same text sounds a little different each time. ``vary=False`` turns that noise
        off: the same text then gives the same audio, which tests want of the speech they
        play (Piper's "Sure," was heard "cheer" in 4 of 150 noisy renderings)."""
        voice = self._voice
        if voice is None:
            raise ClosedError("PiperTTS")
        text = strip_symbols(text)
        if not is_speakable(text):
            return np.zeros(0, dtype=np.int16)
        chunks = [
            trim_silence(
                np.asarray(chunk.audio_int16_array, dtype=np.int16),
                self.sample_rate_hz,
                lead_ms=LEADING_SILENCE_MS,
                trail_ms=self._max_trailing_ms,
            )
            for chunk in voice.synthesize(text, syn_config=None if vary else self._steady)
        ]
        if not chunks:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(chunks)

    def synthesize_head(self, text: str) -> HeadFirst:
        """``text``'s audio with its first ~0.28 s ready before the rest is decoded
        (:mod:`tts.head_first`): ``head`` now, ``rest()`` (blocking) for the remainder.
        The whole chunk in ``head`` when it is short, or the voice cannot be cut."""
        voice = self._voice
        if voice is None:
            raise ClosedError("PiperTTS")
        decoder = self._head
        if decoder is None:
            return HeadFirst(self.synthesize(text))
        text = strip_symbols(text)
        sentences = [p for p in voice.phonemize(text) if p] if is_speakable(text) else []
        if not sentences:
            return HeadFirst(np.zeros(0, dtype=np.int16))
        z = decoder.latent(self._feeds(voice.phonemes_to_ids(sentences[0]), self._scales))
        later = sentences[1:]
        if not worth_cutting(z.shape[-1]):
            first = self._trim(_to_int16(_normalized(decoder.decode(z))))
            return HeadFirst(np.concatenate([first, *(self._sentence(p) for p in later)]))
        raw = decoder.head(z)
        gain = head_gain(float(np.max(np.abs(raw))), self._reference_peak)
        head = self._trim(_to_int16(raw * gain), trail_ms=_NO_TRIM_MS)

        def rest() -> NDArray[np.int16]:
            tail = self._trim(_to_int16(decoder.rest(z) * gain), lead_ms=_NO_TRIM_MS)
            return np.concatenate([tail, *(self._sentence(p) for p in later)])

        if not head.size:  # the head was silence: no head start to give
            return HeadFirst(self._trim(rest()))
        per_frame = len(raw) // HEAD_FRAMES
        return HeadFirst(head, rest, (z.shape[-1] - HEAD_FRAMES) * per_frame)

    def _feeds(self, ids: list[int], scales: NDArray[np.float32]) -> dict[str, NDArray[Any]]:
        return {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": scales,
        }

    def _sentence(self, phonemes: list[str]) -> NDArray[np.int16]:
        """One more sentence, as :meth:`synthesize` makes it (Piper scales it to a peak of 1)."""
        voice = self._voice
        if voice is None:
            raise ClosedError("PiperTTS")
        audio = np.asarray(voice.phoneme_ids_to_audio(voice.phonemes_to_ids(phonemes)), dtype=np.float32)
        return self._trim(_to_int16(_normalized(audio)))

    def _trim(
        self, pcm: NDArray[np.int16], *, lead_ms: int = LEADING_SILENCE_MS, trail_ms: int | None = None
    ) -> NDArray[np.int16]:
        trail = self._max_trailing_ms if trail_ms is None else trail_ms
        return trim_silence(pcm, self.sample_rate_hz, lead_ms=lead_ms, trail_ms=trail)

    def _measure_reference_peak(self) -> float:
        """The voice's raw peak on :data:`CALIBRATION`, noise off (:func:`tts.head_first.head_gain`)."""
        voice, decoder = self._voice, self._head
        assert voice is not None and decoder is not None
        quiet = self._scales.copy()
        quiet[0] = quiet[2] = 0.0
        peaks = [
            float(
                np.max(np.abs(decoder.decode(decoder.latent(self._feeds(voice.phonemes_to_ids(p), quiet)))))
            )
            for text in CALIBRATION
            for p in voice.phonemize(text)
            if p
        ]
        return max(peaks, default=1.0)

    def close(self) -> None:
        """Release the ONNX sessions. Idempotent."""
        self._voice = None
        self._head = None


def _head_decoder(model: str | bytes, make_session: Callable[[bytes], Any]) -> HeadDecoder | None:
    """The voice's front and decoder as two sessions (:mod:`tts.head_first`); None (logged)
    if its graph cannot be cut there."""
    try:
        import onnx
    except ImportError as exc:
        raise MissingPackageError("onnx") from exc
    graph = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)
    parts = split_voice(graph)
    if parts is None:
        log.info("tts.head_first: this voice's graph has no decoder to cut; whole chunks only")
        return None
    try:
        return HeadDecoder(*parts, make_session=make_session)
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise ModelError(f"cannot load the two halves of the Piper voice: {exc}") from exc


def _normalized(audio: NDArray[np.float32]) -> NDArray[np.float32]:
    """Piper's own scaling of a sentence (``normalize_audio``): to a peak of 1."""
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    return audio / peak if peak >= 1e-8 else np.zeros_like(audio)


def _to_int16(audio: NDArray[np.float32]) -> NDArray[np.int16]:
    """As Piper's ``audio_int16_array``: clipped to [-1, 1], then scaled."""
    clipped = np.clip(audio, -1.0, 1.0)
    return np.clip(clipped * 32767.0, -32767.0, 32767.0).astype(np.int16)


def conv2d_model(voice_path: Path) -> str | bytes:
    """The voice with its 1-D convolutions as 2-D ones (:mod:`tts.conv2d`), serialized; its
    path when it has none to rewrite."""
    try:
        import onnx
    except ImportError as exc:
        raise MissingPackageError("onnx") from exc
    from tts.conv2d import rewrite_conv1d

    try:
        model = onnx.load(str(voice_path))
    except Exception as exc:  # onnx raises protobuf's untyped DecodeError, among others
        raise ModelError(f"cannot load Piper voice {voice_path}: {exc}") from exc
    return model.SerializeToString() if rewrite_conv1d(model) else str(voice_path)


def trim_silence(
    audio: NDArray[np.int16],
    rate_hz: int,
    *,
    lead_ms: int,
    trail_ms: int,
    floor_dbfs: float = SILENCE_FLOOR_DBFS,
) -> NDArray[np.int16]:
    """Keep at most ``lead_ms``/``trail_ms`` of silence around the voiced part of ``audio``.

    Silence is a ``_FRAME_MS`` frame whose RMS is below ``floor_dbfs``. All-silent
    audio becomes empty. A cut edge gets a 2 ms fade so it cannot click.
    """
    frame = max(1, rate_hz * _FRAME_MS // 1000)
    n_frames = math.ceil(len(audio) / frame)
    if n_frames == 0:
        return audio[:0]
    padded = np.zeros(n_frames * frame, dtype=np.float64)
    padded[: len(audio)] = audio
    rms = np.sqrt(np.mean(padded.reshape(n_frames, frame) ** 2, axis=1))
    voiced = np.flatnonzero(rms >= 32767.0 * 10.0 ** (floor_dbfs / 20.0))
    if voiced.size == 0:
        return audio[:0]
    start = max(0, int(voiced[0]) * frame - rate_hz * lead_ms // 1000)
    end = min(len(audio), (int(voiced[-1]) + 1) * frame + rate_hz * trail_ms // 1000)
    out = audio[start:end].copy()
    fade = min(len(out), rate_hz * _FADE_MS // 1000)
    if fade > 0 and start > 0:
        out[:fade] = (out[:fade] * np.linspace(0.0, 1.0, fade)).astype(np.int16)
    if fade > 0 and end < len(audio):
        out[-fade:] = (out[-fade:] * np.linspace(1.0, 0.0, fade)).astype(np.int16)
    return out
