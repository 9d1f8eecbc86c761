"""WebRTC VAD (the ``webrtcvad`` module of the ``webrtcvad-wheels`` package).

A GMM classifier: cheap (a few us per frame) but coarse. Each 30 ms frame scores
1.0 (speech) or 0.0. ``cfg.webrtc_mode`` is its aggressiveness, 0 (least) to 3.
Each stream owns its own ``webrtcvad.Vad`` (it keeps adaptive noise state).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from vad.base import FrameSplitter
from voice_pipeline.errors import ConfigError, MissingPackageError

if TYPE_CHECKING:
    from voice_pipeline.config import VADConfig

FRAME_MS = 30
SUPPORTED_RATES_HZ = (8000, 16000, 32000, 48000)


def _import_webrtcvad() -> Any:
    try:
        import webrtcvad
    except ImportError as exc:
        raise MissingPackageError("webrtcvad", "webrtcvad-wheels") from exc
    return webrtcvad


def float_to_pcm16(samples: NDArray[np.float32]) -> bytes:
    """float32 in [-1, 1] -> little-endian int16 bytes, clipping out-of-range samples."""
    scaled = np.rint(np.asarray(samples, dtype=np.float32) * 32768.0)
    pcm: bytes = np.clip(scaled, -32768, 32767).astype("<i2").tobytes()
    return pcm


class WebRTCVAD:
    """WebRTC VAD engine: 30 ms frames, probability 1.0 or 0.0."""

    def __init__(self, cfg: VADConfig, sample_rate_hz: int) -> None:
        if sample_rate_hz not in SUPPORTED_RATES_HZ:
            raise ConfigError(
                f"vad: WebRTC VAD supports {', '.join(map(str, SUPPORTED_RATES_HZ))} Hz, not {sample_rate_hz}"
            )
        if not 0 <= cfg.webrtc_mode <= 3:
            raise ConfigError("vad.webrtc_mode: must be 0..3")
        self._webrtcvad = _import_webrtcvad()
        self.sample_rate_hz = sample_rate_hz
        self.frame_samples = sample_rate_hz * FRAME_MS // 1000
        self.mode = cfg.webrtc_mode

    def stream(self) -> WebRTCVADStream:
        return WebRTCVADStream(self)

    def close(self) -> None:
        """Nothing to release (each stream owns its small C object)."""

    def _new_vad(self) -> Any:
        return self._webrtcvad.Vad(self.mode)


class WebRTCVADStream:
    """Per-session WebRTC scorer with a partial-frame buffer."""

    def __init__(self, engine: WebRTCVAD) -> None:
        self._engine = engine
        self.frame_samples = engine.frame_samples
        self._rate = engine.sample_rate_hz
        self._vad = engine._new_vad()
        self._frames = FrameSplitter(self.frame_samples)

    def push(self, samples: NDArray[np.float32]) -> list[float]:
        """Add mono float32 samples (any length); 1.0/0.0 per completed frame."""
        audio = self._frames.split(samples)
        n = self.frame_samples
        probs: list[float] = []
        if audio.size:
            pcm = float_to_pcm16(audio)
            step = 2 * n
            for start in range(0, len(pcm), step):
                speech = self._vad.is_speech(pcm[start : start + step], self._rate)
                probs.append(1.0 if speech else 0.0)
        return probs

    def reset(self) -> None:
        """Forget the adaptive state and any buffered partial frame."""
        self._vad = self._engine._new_vad()
        self._frames.reset()
