"""RemoteVLLM against a real vLLM OpenAI server subprocess (runs in CI), plus SSE parsing."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from test_llm_tools_wire import WEATHER

from llm.base import ChatMessage, LLMDelta, ToolOffer
from llm.openai_wire import DONE, SSEChunk, parse_sse_line, stream_body
from llm.remote import RemoteVLLM
from voice_pipeline.config import DEFAULT_SYSTEM_PROMPT, LLMConfig
from voice_pipeline.errors import EngineError

if TYPE_CHECKING:
    pass

QUESTION = [
    ChatMessage("system", DEFAULT_SYSTEM_PROMPT),
    ChatMessage("user", "What is the capital of France? Answer in one sentence."),
]
STORY = [ChatMessage("user", "Tell me a very long story about a dragon and a knight.")]


# ---------------------------------------------------------------- pure: the request


def test_the_repetition_penalty_goes_as_vllms_extra_parameter() -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    kw = {"max_tokens": 96, "temperature": 0.0, "top_p": 1.0}
    assert "repetition_penalty" not in stream_body("m", QUESTION, None, **kw)  # 1.0: none, any server
    body = stream_body("m", QUESTION, None, repetition_penalty=1.1, **kw)  # set by the user
    assert body["repetition_penalty"] == 1.1
    # vLLM's server reads it into the request's sampling
    params = ChatCompletionRequest.model_validate(body).to_sampling_params(96, {})
    assert params.repetition_penalty == 1.1


# ---------------------------------------------------------------- pure: SSE parsing


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("", None),
        (": keep-alive", None),
        ("event: message", None),
        ("data: [DONE]", DONE),
        ('data: {"choices":[{"delta":{"role":"assistant","content":""}}]}', SSEChunk("", None, None)),
        (
            'data: {"choices":[{"delta":{"content":" Paris"},"finish_reason":null}],'
            '"usage":{"completion_tokens":3}}',
            SSEChunk(" Paris", 3, None),
        ),
        ('data:{"choices":[{"delta":{},"finish_reason":"stop"}]}', SSEChunk("", None, "stop")),
        ('data: {"choices":[],"usage":{"completion_tokens":8}}', SSEChunk("", 8, None)),
        (
            'data: {"choices":[{"delta":{"content":"The"}}],"usage":{"prompt_tokens":49,'
            '"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":32}}}',
            SSEChunk("The", 1, None, 49, 32),
        ),
        (  # a server without prompt token details; junk values are ignored
            'data: {"choices":[],"usage":{"prompt_tokens":49,"completion_tokens":true,'
            '"prompt_tokens_details":null}}',
            SSEChunk("", None, None, 49, None),
        ),
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


async def running_on_server(base_url: str) -> float:
    """``vllm:num_requests_running`` summed over the server's engines."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(base_url.removesuffix("/v1") + "/metrics")).text
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_running")
    ]
    assert values, "the server exports no vllm:num_requests_running"
    return sum(values)


@pytest.fixture
async def remote(vllm_server_url: str) -> AsyncIterator[RemoteVLLM]:
    llm = RemoteVLLM(LLMConfig(engine="remote", url=vllm_server_url))  # model asked from /models
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
    print(
        f"\nvLLM over HTTP: TTFT {1000 * (first_at - start):.0f} ms (incl. /models once), "
        f"{(tokens - 1) / max(end - first_at, 1e-9):.1f} tok/s after the first, "
        f"{tokens} tokens in {len(deltas)} deltas: {text!r}"
    )
    assert "Paris" in text
    assert len(deltas) > 1
    assert remote.unfinished_requests() == 0


@pytest.mark.real_models
async def test_closing_the_stream_aborts_on_the_server(remote: RemoteVLLM, vllm_server_url: str) -> None:
    received = 0
    async with contextlib.aclosing(remote.stream(STORY, "close")) as stream:
        async for _ in stream:
            received += 1
            if received == 3:
                assert remote.unfinished_requests() == 1
                assert await running_on_server(vllm_server_url) == 1
                break
    assert remote.unfinished_requests() == 0
    running = await running_on_server(vllm_server_url)
    for _ in range(100):  # the gauge is updated by the server's next engine step
        if running == 0:
            break
        await asyncio.sleep(0.1)
        running = await running_on_server(vllm_server_url)
    assert running == 0, "the server kept generating after the client closed the stream"


@pytest.mark.real_models
async def test_abort_ends_the_stream_quietly(remote: RemoteVLLM, vllm_server_url: str) -> None:
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
async def test_abort_while_connecting(remote: RemoteVLLM, vllm_server_url: str) -> None:
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


@pytest.mark.real_models
async def prompt_figures(remote: RemoteVLLM, messages: list[ChatMessage], rid: str) -> LLMDelta:
    """The last delta that says how the prompt was served (the cached count comes last)."""
    deltas = [d async for d in remote.stream(messages, rid)]
    assert deltas[0].prompt_tokens is not None and deltas[0].prefill_ms is not None
    assert all(d.prompt_tokens is None for d in deltas[1:-1])
    tail = deltas[-1]
    if tail.prompt_tokens is not None:  # the final usage: no text, no tokens, the first's figures
        assert (tail.text, tail.num_tokens, tail.prefill_ms) == ("", 0, deltas[0].prefill_ms)
        return tail
    return deltas[0]


@pytest.mark.real_models
async def test_the_reply_reports_prompt_and_cached_tokens(remote: RemoteVLLM) -> None:
    served = []
    for i in range(2):
        messages = [QUESTION[0], ChatMessage("user", f"Name a fruit, please (remote {i}).")]
        served.append(await prompt_figures(remote, messages, f"usage-{i}"))
    for s in served:
        assert s.prompt_tokens is not None and s.prompt_tokens > 32
        assert s.prefill_ms is not None and s.prefill_ms > 0
    # the server runs with --enable-prompt-tokens-details: the system prompt's block is reused
    assert served[1].cached_tokens is not None and served[1].cached_tokens >= 32


@pytest.mark.real_models
async def test_prefill_warms_the_prefix_on_the_server(remote: RemoteVLLM) -> None:
    from llm.base import PrefillOutcome

    history = [
        QUESTION[0],
        ChatMessage("user", "I am planning a trip to Paris next spring with my two children."),
        ChatMessage("assistant", "That sounds lovely. Spring is a fine time to visit Paris."),
    ]
    partial = "Which museums would you recommend for"
    result = await remote.prefill([*history, ChatMessage("user", partial)], "remote-prefill")
    assert result.outcome is PrefillOutcome.WARMED, result
    assert result.prompt_tokens > 64 and remote.unfinished_requests() == 0
    messages = [*history, ChatMessage("user", f"{partial} young children?")]
    served = await prompt_figures(remote, messages, "after-prefill")
    assert served.cached_tokens == result.prompt_tokens // 32 * 32, (served, result)


@pytest.mark.real_models
async def test_cancelling_a_remote_prefill_closes_it(remote: RemoteVLLM) -> None:
    long = [QUESTION[0], ChatMessage("user", "some words " * 400)]
    task = asyncio.create_task(remote.prefill(long, "remote-pre-cancel"))
    await asyncio.sleep(0)
    assert remote.unfinished_requests() == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert remote.unfinished_requests() == 0


@pytest.mark.real_models
async def test_aborting_a_remote_prefill_returns_quietly(remote: RemoteVLLM) -> None:
    from llm.base import PrefillOutcome

    long = [QUESTION[0], ChatMessage("user", "more words " * 400)]
    task = asyncio.create_task(remote.prefill(long, "remote-pre-abort"))
    await asyncio.sleep(0)
    await remote.abort("remote-pre-abort")
    result = await task
    assert result.outcome is PrefillOutcome.ABORTED
    assert remote.unfinished_requests() == 0


@pytest.mark.real_models
async def test_the_server_is_asked_for_the_penalty_on_words_not_on_calls(
    vllm_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import llm.remote

    remote = RemoteVLLM(LLMConfig(engine="remote", url=vllm_server_url, repetition_penalty=1.1))

    bodies: list[dict[str, Any]] = []

    def spy(*args: Any, **kwargs: Any) -> dict[str, Any]:
        bodies.append(body := stream_body(*args, **kwargs))
        return body

    monkeypatch.setattr(llm.remote, "stream_body", spy)
    assert "".join([d.text async for d in remote.stream(QUESTION, "penalty-words")])
    offer = ToolOffer((WEATHER,), function="get_weather")
    deltas = [d async for d in remote.stream(QUESTION, "penalty-call", offer)]
    assert any(d.tool_calls for d in deltas)
    await remote.aclose()
    assert [b.get("repetition_penalty") for b in bodies] == [1.1, None]
