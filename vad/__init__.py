"""VAD stage: when the user speaks and when they have finished.

Interfaces in :mod:`vad.base`; the frame scorers are built by :func:`build_vad`, the
audio turn-completion model by :func:`build_turn_model`; the decisions are the pure
:mod:`vad.endpointer` (segmentation) and :mod:`vad.end_of_turn` (the semantic policy).

A new frame scorer is one module implementing :class:`vad.base.VAD` and one
:meth:`ENGINES.register <voice_pipeline.engine_registry.EngineRegistry.register>` line:
here for the project's own, anywhere before the engines are built for anyone else's.
Its factory gets the ``vad`` config section, the pipeline's sample rate and the model
``voice-pipeline models`` prepared (Silero's; None to use the package's own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from voice_pipeline.engine_registry import EngineRegistry

if TYPE_CHECKING:
    from pathlib import Path

    from vad.base import VAD, TurnModel
    from voice_pipeline.config import TurnConfig, VADConfig


VADFactory = Callable[["VADConfig", int, "Path | None"], "VAD"]
ENGINES: EngineRegistry[VADFactory] = EngineRegistry("vad")


def build_vad(cfg: VADConfig, sample_rate_hz: int, model_path: Path | None = None) -> VAD:
    """Build the engine named by ``cfg.engine`` (heavy imports happen here)."""
    return ENGINES.factory(cfg.engine)(cfg, sample_rate_hz, model_path)


def _silero(cfg: VADConfig, sample_rate_hz: int, model_path: Path | None) -> VAD:
    from vad.silero import SileroVAD

    return SileroVAD(cfg, sample_rate_hz, model_path)


def _webrtc(cfg: VADConfig, sample_rate_hz: int, model_path: Path | None) -> VAD:
    from vad.webrtc import WebRTCVAD

    return WebRTCVAD(cfg, sample_rate_hz)


ENGINES.register("silero", _silero)
ENGINES.register("webrtc", _webrtc)


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
