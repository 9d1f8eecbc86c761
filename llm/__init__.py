"""LLM stage: interface in :mod:`llm.base`, engines built by :func:`build_llm`.

Note: ``llm`` is also the name of an unrelated PyPI package; this folder is the
project's own stage package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from llm.base import LLM
    from voice_pipeline.config import LLMConfig


def build_llm(cfg: LLMConfig, model_dir: Path | None) -> LLM:
    """In-process vLLM (``vllm``) or a remote OpenAI-compatible vLLM server (``remote``)."""
    if cfg.engine == "vllm":
        from llm.vllm_engine import VLLMEngine

        assert model_dir is not None
        return VLLMEngine(cfg, model_dir)
    if cfg.engine == "remote":
        from llm.remote import RemoteVLLM

        return RemoteVLLM(cfg)
    raise AssertionError(cfg.engine)
