"""LLM stage: interface in :mod:`llm.base`, engines built by :func:`build_llm`.

A new engine is one module implementing :class:`llm.base.LLM` and one
:meth:`ENGINES.register <voice_pipeline.engine_registry.EngineRegistry.register>` line:
here for the project's own, anywhere before the engines are built for anyone else's.
Its factory gets the ``llm`` config section and the model folder ``voice-pipeline
models`` prepared (None when the config needs none, as ``remote`` does).

Note: ``llm`` is also the name of an unrelated PyPI package; this folder is the
project's own stage package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from voice_pipeline.engine_registry import EngineRegistry

if TYPE_CHECKING:
    from pathlib import Path

    from llm.base import LLM
    from voice_pipeline.config import LLMConfig

LLMFactory = Callable[["LLMConfig", "Path | None"], "LLM"]
ENGINES: EngineRegistry[LLMFactory] = EngineRegistry("llm")


def build_llm(cfg: LLMConfig, model_dir: Path | None) -> LLM:
    """In-process vLLM (``vllm``), a remote OpenAI-compatible vLLM server (``remote``), or a
    registered engine."""
    return ENGINES.factory(cfg.engine)(cfg, model_dir)


def _vllm(cfg: LLMConfig, model_dir: Path | None) -> LLM:
    from llm.vllm_engine import VLLMEngine

    assert model_dir is not None
    return VLLMEngine(cfg, model_dir)


def _remote(cfg: LLMConfig, model_dir: Path | None) -> LLM:
    from llm.remote import RemoteVLLM

    return RemoteVLLM(cfg)


ENGINES.register("vllm", _vllm)
ENGINES.register("remote", _remote)
