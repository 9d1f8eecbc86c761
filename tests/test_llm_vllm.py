"""VLLMEngine with the real SmolLM2-135M (runs in CI): streaming, cancellation, abort."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import itertools
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from test_llm_tools_wire import WEATHER

from llm.base import LLM, ChatMessage, LLMDelta, ToolOffer
from voice_pipeline.config import DEFAULT_SYSTEM_PROMPT, ASRConfig, LLMConfig
from voice_pipeline.errors import EngineError, ModelError

if TYPE_CHECKING:
    from voice_pipeline.models import ModelPaths

pytestmark = pytest.mark.real_models

QUESTION = [
    ChatMessage("system", DEFAULT_SYSTEM_PROMPT),
    ChatMessage("user", "What is the capital of France? Answer in one sentence."),
]
#: a prompt whose reply runs to max_tokens, so there is always something to cancel
STORY = [ChatMessage("user", "Tell me a very long story about a dragon and a knight.")]

_ids = itertools.count()


def request_id(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


async def test_reply_streams_incrementally_and_mentions_paris(vllm_engine: LLM) -> None:
    deltas: list[LLMDelta] = []
    start = time.monotonic()
    first_at = 0.0
    async for delta in vllm_engine.stream(QUESTION, request_id("paris")):
        if not deltas:
            first_at = time.monotonic()
        deltas.append(delta)
    end = time.monotonic()
    text = "".join(d.text for d in deltas)
    tokens = sum(d.num_tokens for d in deltas)
    print(
        f"\nvLLM in-process: TTFT {1000 * (first_at - start):.0f} ms, "
        f"{(tokens - 1) / max(end - first_at, 1e-9):.1f} tok/s after the first, "
        f"{tokens} tokens in {len(deltas)} deltas: {text!r}"
    )
    assert "Paris" in text
    assert len(deltas) > 1
    assert all(d.num_tokens >= 1 for d in deltas)
    assert vllm_engine.unfinished_requests() == 0


async def test_closing_the_stream_mid_way_aborts_at_once(vllm_engine: LLM) -> None:
    received = 0
    async with contextlib.aclosing(vllm_engine.stream(STORY, request_id("close"))) as stream:
        async for _ in stream:
            received += 1
            assert vllm_engine.unfinished_requests() == 1
            if received == 3:
                break
    assert received == 3
    assert vllm_engine.unfinished_requests() == 0


async def test_plain_break_aborts_once_the_generator_is_collected(vllm_engine: LLM) -> None:
    # without aclosing() the event loop's async-generator finalizer closes the stream
    async for _ in vllm_engine.stream(STORY, request_id("break")):
        break
    gc.collect()
    for _ in range(200):
        if vllm_engine.unfinished_requests() == 0:
            break
        await asyncio.sleep(0.01)
    assert vllm_engine.unfinished_requests() == 0


async def test_cancelling_the_consumer_task_aborts_at_once(vllm_engine: LLM) -> None:
    got_some = asyncio.Event()
    received: list[str] = []

    async def consume() -> None:
        async for delta in vllm_engine.stream(STORY, request_id("cancel")):
            received.append(delta.text)
            if len(received) == 3:
                got_some.set()

    task = asyncio.create_task(consume())
    await got_some.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert vllm_engine.unfinished_requests() == 0


async def test_explicit_abort_ends_the_stream(vllm_engine: LLM) -> None:
    rid = request_id("abort")
    received: list[LLMDelta] = []
    async for delta in vllm_engine.stream(STORY, rid):
        received.append(delta)
        if len(received) == 3:
            await vllm_engine.abort(rid)
            assert vllm_engine.unfinished_requests() == 0
    # the stream ends quietly right after the abort, long before max_tokens
    assert 3 <= len(received) < LLMConfig().max_tokens
    assert vllm_engine.unfinished_requests() == 0


async def test_abort_right_after_start_yields_nothing(vllm_engine: LLM) -> None:
    rid = request_id("early")
    received: list[LLMDelta] = []

    async def consume() -> None:
        async for delta in vllm_engine.stream(STORY, rid):
            received.append(delta)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)  # the stream has started; vLLM may not know the request yet
    await vllm_engine.abort(rid)
    await task
    assert received == []
    assert vllm_engine.unfinished_requests() == 0


async def test_twenty_abort_cycles_leave_nothing_behind(vllm_engine: LLM) -> None:
    for cycle in range(20):
        rid = request_id("cycle")
        stream = vllm_engine.stream(STORY, rid)
        first = await anext(stream)
        assert first.text or first.num_tokens
        if cycle % 2:
            await vllm_engine.abort(rid)
        await stream.aclose()
        assert vllm_engine.unfinished_requests() == 0, f"cycle {cycle}"
    # and the engine still answers afterwards
    text = "".join([d.text async for d in vllm_engine.stream(QUESTION, request_id("after"))])
    assert "Paris" in text


async def test_too_long_prompt_is_a_non_retryable_error(vllm_engine: LLM) -> None:
    huge = [ChatMessage("user", "word " * (LLMConfig().max_model_len + 100))]
    with pytest.raises(EngineError) as info:
        async for _ in vllm_engine.stream(huge, request_id("huge")):
            pass
    assert not info.value.retryable
    assert vllm_engine.unfinished_requests() == 0


def test_missing_model_folder_is_a_model_error(tmp_path: Path) -> None:
    from llm.vllm_engine import VLLMEngine

    with pytest.raises(ModelError, match=r"config\.json"):
        VLLMEngine(LLMConfig(), tmp_path / "nowhere")


def test_prepared_model_folder_is_a_complete_conversion(model_paths: ModelPaths) -> None:
    from llm.convert import is_converted

    assert model_paths.llm is not None
    assert is_converted(model_paths.llm)
    assert "quantization_config" not in (model_paths.llm / "config.json").read_text()
    assert not list(model_paths.llm.parent.glob(f".{model_paths.llm.name}.partial-*"))


def test_convert_of_a_missing_gguf_leaves_nothing(tmp_path: Path) -> None:
    from llm.convert import convert_gguf_to_hf

    with pytest.raises(ModelError, match="not found"):
        convert_gguf_to_hf(tmp_path / "missing.gguf", tmp_path / "out", lambda msg: None)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------- prefix cache and prefill


def _history(tag: str) -> list[ChatMessage]:
    """System prompt + a conversation no other test had (so nothing of it is cached)."""
    return [
        ChatMessage("system", DEFAULT_SYSTEM_PROMPT),
        ChatMessage("user", f"My name is {tag}. What is the capital of France?"),
        ChatMessage("assistant", "The capital of France is Paris, a city on the river Seine."),
        ChatMessage("user", "And how many people live there, roughly speaking?"),
        ChatMessage("assistant", "About two million people live in the city of Paris itself."),
    ]


def test_engine_runs_with_the_settings_chosen_for_this_machine(vllm_engine: LLM) -> None:
    from llm.vllm_engine import VLLMEngine
    from voice_pipeline.cpu import this_cpu
    from voice_pipeline.tuning import choose

    assert isinstance(vllm_engine, VLLMEngine)
    t = choose(this_cpu(), LLMConfig(), ASRConfig())
    assert vllm_engine.settings == {
        "dtype": t.dtype,
        "threads": t.llm_threads,
        "kv_block_tokens": 32,
        "compile": t.compile,
    }


async def test_first_delta_says_how_the_prompt_was_served(vllm_engine: LLM) -> None:
    firsts: list[LLMDelta] = []
    for i in range(2):  # the second request finds the system prompt's whole block cached
        messages = [QUESTION[0], ChatMessage("user", f"Name a colour, please ({request_id('c')}-{i}).")]
        deltas = [d async for d in vllm_engine.stream(messages, request_id("served"))]
        firsts.append(deltas[0])
        assert all(d.prompt_tokens is None and d.prefill_ms is None for d in deltas[1:])
    for first in firsts:
        assert first.prompt_tokens is not None and first.prompt_tokens > 32
        assert first.prefill_ms is not None and first.prefill_ms > 0
        assert first.cached_tokens is not None and first.cached_tokens % 32 == 0
    assert firsts[1].cached_tokens is not None and firsts[1].cached_tokens >= 32
    print(
        f"\nfirst delta: {firsts[1].prompt_tokens} prompt tokens, {firsts[1].cached_tokens} cached, "
        f"{firsts[1].prefill_ms:.0f} ms to the first token"
    )


async def test_prefill_puts_history_and_partial_into_the_cache(vllm_engine: LLM) -> None:
    from llm.base import PrefillOutcome

    history = _history(request_id("prefill"))
    question = "What is the tallest building in the city, and how tall is it?"
    partial = " ".join(question.split()[:5])
    result = await vllm_engine.prefill([*history, ChatMessage("user", partial)], request_id("pre"))
    assert result.outcome is PrefillOutcome.WARMED and result.error is None
    assert result.prompt_tokens > 64 and result.elapsed_ms > 0
    assert vllm_engine.unfinished_requests() == 0
    stream = vllm_engine.stream([*history, ChatMessage("user", question)], request_id("after-pre"))
    async with contextlib.aclosing(stream):
        first = await anext(stream)
    # every whole block of the prefilled prefix is reused: the prefix is a token prefix of the prompt
    assert first.cached_tokens == result.prompt_tokens // 32 * 32, (first, result)
    assert first.prompt_tokens is not None and first.prompt_tokens > result.prompt_tokens


async def test_cancelling_a_prefill_aborts_it(vllm_engine: LLM) -> None:
    long = [ChatMessage("system", DEFAULT_SYSTEM_PROMPT), ChatMessage("user", "words and more " * 300)]
    task = asyncio.create_task(vllm_engine.prefill(long, request_id("pre-cancel")))
    await asyncio.sleep(0.02)
    assert vllm_engine.unfinished_requests() == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert vllm_engine.unfinished_requests() == 0


async def test_abort_ends_a_prefill_quietly(vllm_engine: LLM) -> None:
    from llm.base import PrefillOutcome

    rid = request_id("pre-abort")
    long = [ChatMessage("system", DEFAULT_SYSTEM_PROMPT), ChatMessage("user", "other words " * 400)]
    task = asyncio.create_task(vllm_engine.prefill(long, rid))
    await asyncio.sleep(0.02)
    await vllm_engine.abort(rid)
    result = await task  # no exception
    assert result.outcome is PrefillOutcome.ABORTED
    assert vllm_engine.unfinished_requests() == 0


async def test_a_prefill_too_long_fails_without_raising(vllm_engine: LLM) -> None:
    from llm.base import PrefillOutcome

    huge = [ChatMessage("user", "word " * (LLMConfig().max_model_len + 100))]
    result = await vllm_engine.prefill(huge, request_id("pre-huge"))
    assert result.outcome is PrefillOutcome.FAILED and "max_model_len" in (result.error or "")
    assert vllm_engine.unfinished_requests() == 0


async def test_the_repetition_penalty_is_for_words_not_for_calls(
    vllm_engine: LLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call copies names and values from the prompt, which the penalty would push away."""
    penalties: list[float] = []
    outputs, cfg = vllm_engine._outputs, vllm_engine._cfg  # type: ignore[attr-defined]
    monkeypatch.setattr(vllm_engine, "_cfg", dataclasses.replace(cfg, repetition_penalty=1.1))  # a user's

    def spy(engine: object, ids: list[int], params: Any, rid: str) -> Any:
        penalties.append(params.repetition_penalty)
        return outputs(engine, ids, params, rid)

    monkeypatch.setattr(vllm_engine, "_outputs", spy)
    assert "".join([d.text async for d in vllm_engine.stream(QUESTION, request_id("words"))])
    offer = ToolOffer((WEATHER,), function="get_weather")
    deltas = [d async for d in vllm_engine.stream(QUESTION, request_id("call"), offer)]
    assert any(d.tool_calls for d in deltas)
    assert penalties == [1.1, 1.0]
