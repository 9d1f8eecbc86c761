"""TTS stage: interface in :mod:`tts.base`, engines built by :func:`build_tts`.

A new engine is one module implementing :class:`tts.base.TTS` and one
:meth:`ENGINES.register <voice_pipeline.engine_registry.EngineRegistry.register>` line:
here for the project's own, anywhere before the engines are built for anyone else's.
Its factory gets the ``tts`` config section and a voice path: the Piper voice
``voice-pipeline models`` prepared, or for an engine of its own kind (for which nothing
is prepared) ``tts.voice_path`` as configured, else where Piper's would be: it may ignore it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from voice_pipeline.engine_registry import EngineRegistry

if TYPE_CHECKING:
    from pathlib import Path

    from tts.base import TTS
    from voice_pipeline.config import TTSConfig

TTSFactory = Callable[["TTSConfig", "Path"], "TTS"]
ENGINES: EngineRegistry[TTSFactory] = EngineRegistry("tts")


def build_tts(cfg: TTSConfig, voice_path: Path) -> TTS:
    return ENGINES.factory(cfg.engine)(cfg, voice_path)


def _piper(cfg: TTSConfig, voice_path: Path) -> TTS:
    from tts.piper import PiperTTS

    return PiperTTS(cfg, voice_path)


ENGINES.register("piper", _piper)
