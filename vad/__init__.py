"""VAD stage: interface in :mod:`vad.base`, engines built by :func:`build_vad`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from vad.base import VAD
    from voice_pipeline.config import VADConfig


def build_vad(cfg: VADConfig, sample_rate_hz: int, model_path: Path | None = None) -> VAD:
    """Build the engine named by ``cfg.engine`` (heavy imports happen here)."""
    if cfg.engine == "silero":
        from vad.silero import SileroVAD

        return SileroVAD(cfg, sample_rate_hz, model_path)
    if cfg.engine == "webrtc":
        from vad.webrtc import WebRTCVAD

        return WebRTCVAD(cfg, sample_rate_hz)
    raise AssertionError(cfg.engine)  # config validation rejects anything else
