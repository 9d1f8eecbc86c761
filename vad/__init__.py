"""VAD stage: when the user speaks and when they have finished.

Interfaces in :mod:`vad.base`; the frame scorers are built by :func:`build_vad`, the
audio turn-completion model by :func:`build_turn_model`; the decisions are the pure
:mod:`vad.endpointer` (segmentation) and :mod:`vad.end_of_turn` (the semantic policy)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from vad.base import VAD, TurnModel
    from voice_pipeline.config import TurnConfig, VADConfig


def build_vad(cfg: VADConfig, sample_rate_hz: int, model_path: Path | None = None) -> VAD:
    """Build the engine named by ``cfg.engine`` (heavy imports happen here)."""
    if cfg.engine == "silero":
        from vad.silero import SileroVAD

        return SileroVAD(cfg, sample_rate_hz, model_path)
    if cfg.engine == "webrtc":
        from vad.webrtc import WebRTCVAD

        return WebRTCVAD(cfg, sample_rate_hz)
    raise AssertionError(cfg.engine)  # config validation rejects anything else


def build_turn_model(cfg: TurnConfig, model_path: Path | None) -> TurnModel | None:
    """The turn model named by ``cfg.model`` (None for "none" or when the policy is off)."""
    if not cfg.semantic or cfg.model == "none":
        return None
    if cfg.model == "smart-turn":
        from vad.smart_turn import SmartTurn

        if model_path is None:
            raise AssertionError("the turn model's path comes from voice-pipeline models")
        return SmartTurn(model_path, threads=cfg.model_threads)
    raise AssertionError(cfg.model)  # config validation rejects anything else
