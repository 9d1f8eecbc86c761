"""ASR stage: interface in :mod:`asr.base`, engines built by :func:`build_asr`.

A new engine is one module implementing :class:`asr.base.ASREngine` and one
:meth:`ENGINES.register <voice_pipeline.engine_registry.EngineRegistry.register>` line:
here for the project's own, anywhere before the engines are built for anyone else's.
Its factory gets the ``asr`` config section and the model folder ``voice-pipeline
models`` prepared (Whisper's; an engine of its own kind may ignore it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from voice_pipeline.engine_registry import EngineRegistry

if TYPE_CHECKING:
    from pathlib import Path

    from asr.base import ASREngine
    from voice_pipeline.config import ASRConfig

ASRFactory = Callable[["ASRConfig", "Path"], "ASREngine"]
ENGINES: EngineRegistry[ASRFactory] = EngineRegistry("asr")


def build_asr(cfg: ASRConfig, model_dir: Path) -> ASREngine:
    return ENGINES.factory(cfg.engine)(cfg, model_dir)


def _faster_whisper(cfg: ASRConfig, model_dir: Path) -> ASREngine:
    from asr.faster_whisper import FasterWhisperASR

    return FasterWhisperASR(cfg, model_dir)


ENGINES.register("faster-whisper", _faster_whisper)
