"""Subprocesses for tests: free ports, log tails, process-group shutdown, and a real
vLLM OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from voice_pipeline.config import LLMConfig

VLLM_START_TIMEOUT_S = 120.0
SERVED_MODEL_NAME = "smollm2"


class ProcessFailed(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group (e.g. API server + EngineCore), SIGKILL if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout_s: float) -> None:
    """Poll ``url`` until it answers 200; raise :class:`ProcessFailed` with the log's tail."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ProcessFailed(f"{proc.args!r} exited with {proc.returncode}:\n{tail(log_path)}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise ProcessFailed(f"{url} not healthy after {timeout_s:.0f} s:\n{tail(log_path)}")
        time.sleep(0.5)


@contextlib.contextmanager
def vllm_server(
    model_dir: Path, log_path: Path, port: int | None = None, *extra: str, **extra_env: str
) -> Iterator[str]:
    """A real vLLM OpenAI server on loopback; yields its /v1 base URL (model ``smollm2``).
    ``extra``: more command-line arguments; ``extra_env``: more environment variables."""
    from voice_pipeline.emulation import engine_env
    from voice_pipeline.tuning import tuned_llm

    cfg = tuned_llm(LLMConfig())  # the dtype and KV block size chosen for this machine
    port = port or free_port()
    env = dict(os.environ)
    env.update(
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        PYTHONASYNCIODEBUG="0",
        **extra_env,
    )
    env.update(engine_env(env))  # VP_EMULATE_CPU: the server's processes take the emulated kernels
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        SERVED_MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--distributed-executor-backend",
        "uni",
        "--enforce-eager",
        "--dtype",
        cfg.dtype,
        "--max-model-len",
        str(cfg.max_model_len),
        "--kv-cache-memory-bytes",
        str(cfg.kv_cache_mib * 2**20),
        "--block-size",
        str(cfg.kv_block_tokens),
        "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens
        *extra,
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}/health", log_path, VLLM_START_TIMEOUT_S)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_group(proc)
