"""TTS stage: interface in :mod:`tts.base`, engines built by :func:`build_tts`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from tts.base import TTS
    from voice_pipeline.config import TTSConfig


def build_tts(cfg: TTSConfig, voice_path: Path) -> TTS:
    if cfg.engine == "piper":
        from tts.piper import PiperTTS

        return PiperTTS(cfg, voice_path)
    raise AssertionError(cfg.engine)
