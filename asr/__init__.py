"""ASR stage: interface in :mod:`asr.base`, engines built by :func:`build_asr`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from asr.base import ASREngine
    from voice_pipeline.config import ASRConfig


def build_asr(cfg: ASRConfig, model_dir: Path) -> ASREngine:
    if cfg.engine == "faster-whisper":
        from asr.faster_whisper import FasterWhisperASR

        return FasterWhisperASR(cfg, model_dir)
    raise AssertionError(cfg.engine)
