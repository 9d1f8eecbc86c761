"""Tools through the in-process VLLMEngine with the real default model, SmolLM2-135M (runs in
CI): a named tool_choice and ``required`` held to the schema by structured outputs, ``auto``
refused (its chat template cannot render tools), a tool call and its result in the history."""

from __future__ import annotations

import itertools
import json
import time

import pytest

from llm.base import LLM, ChatMessage, LLMDelta, ToolCall, ToolMode, ToolOffer, ToolSpec
from llm.toolcalls import ToolCallCollector
from voice_pipeline.config import DEFAULT_SYSTEM_PROMPT, Config
from voice_pipeline.errors import EngineError

pytestmark = pytest.mark.real_models

WEATHER = ToolSpec(
    "get_weather",
    "Get the current weather in a city.",
    json.dumps(
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        separators=(",", ":"),
    ),
)
TIME = ToolSpec(
    "get_time",
    "Get the current time in a time zone.",
    '{"type":"object","properties":{"zone":{"type":"string"},"hour24":{"type":"boolean"}},'
    '"required":["zone","hour24"]}',
)
ASK = [
    ChatMessage("system", DEFAULT_SYSTEM_PROMPT),
    ChatMessage("user", "What is the weather like in Paris today?"),
]

_ids = itertools.count()


def request_id(prefix: str) -> str:
    return f"tools-{prefix}-{next(_ids)}"


async def collect(
    llm: LLM, messages: list[ChatMessage], offer: ToolOffer | None, prefix: str
) -> tuple[str, list[ToolCall], list[LLMDelta]]:
    deltas = [d async for d in llm.stream(messages, request_id(prefix), offer)]
    collector = ToolCallCollector()
    for delta in deltas:
        collector.add_all(delta.tool_calls)
    return "".join(d.text for d in deltas), collector.calls(), deltas


def check_arguments(call: ToolCall, spec: ToolSpec) -> dict[str, object]:
    """The call's arguments are a JSON object with the schema's required properties, typed."""
    arguments = json.loads(call.arguments)
    schema = json.loads(spec.parameters_json)
    assert isinstance(arguments, dict)
    assert set(schema["required"]) <= set(arguments)
    assert set(arguments) <= set(schema["properties"])
    kinds = {"string": str, "boolean": bool}
    for key, value in arguments.items():
        assert isinstance(value, kinds[schema["properties"][key]["type"]]), (key, value)
    return arguments


async def test_named_tool_choice_yields_one_call_with_schema_arguments(vllm_engine: LLM) -> None:
    offer = ToolOffer((WEATHER, TIME), function="get_weather")
    for run in ("first", "again"):  # the first compiles the grammar; then xgrammar's cache
        start = time.monotonic()
        text, calls, deltas = await collect(vllm_engine, ASK, offer, "named")
        print(f"\nnamed ({run}): {1000 * (time.monotonic() - start):.0f} ms, {calls}")
    start = time.monotonic()
    await collect(vllm_engine, ASK, None, "plain")
    print(f"the same prompt, no tools: {1000 * (time.monotonic() - start):.0f} ms")
    assert text == ""
    assert len(calls) == 1
    assert calls[0].name == "get_weather"
    assert calls[0].call_id.startswith("call_")
    arguments = check_arguments(calls[0], WEATHER)
    assert arguments["city"]
    # every token is counted, and the first delta says how the prompt was served
    assert sum(d.num_tokens for d in deltas) >= 1
    assert deltas[0].prompt_tokens and deltas[0].prefill_ms is not None
    assert vllm_engine.unfinished_requests() == 0


async def test_required_yields_valid_calls_of_offered_tools(vllm_engine: LLM) -> None:
    offer = ToolOffer((WEATHER, TIME), ToolMode.REQUIRED)
    text, calls, deltas = await collect(vllm_engine, ASK, offer, "required")
    print(f"\nrequired: {calls}")
    assert text == ""
    assert 1 <= len(calls)
    specs = {WEATHER.name: WEATHER, TIME.name: TIME}
    for call in calls:
        check_arguments(call, specs[call.name])
    assert len({c.call_id for c in calls}) == len(calls)
    assert [d.index for d in deltas for d in d.tool_calls] == list(range(len(calls)))


async def test_auto_is_refused_with_a_model_that_cannot_call_tools(vllm_engine: LLM) -> None:
    with pytest.raises(EngineError, match="cannot call tools by itself") as info:
        await collect(vllm_engine, ASK, ToolOffer((WEATHER,), ToolMode.AUTO), "auto")
    assert not info.value.retryable
    assert vllm_engine.unfinished_requests() == 0
    assert vllm_engine.health().ok  # a refused request says nothing about the engine


async def test_bad_offers_are_refused_before_the_engine(vllm_engine: LLM) -> None:
    with pytest.raises(EngineError, match="not one of the tools") as info:
        await collect(vllm_engine, ASK, ToolOffer((WEATHER,), function="get_time"), "bad")
    assert not info.value.retryable
    with pytest.raises(EngineError, match="required"):
        await collect(vllm_engine, ASK, ToolOffer((), ToolMode.REQUIRED), "bad")


async def test_mode_none_is_a_plain_reply(vllm_engine: LLM) -> None:
    text, calls, deltas = await collect(
        vllm_engine,
        [ChatMessage("user", "What is the capital of France? Answer in one sentence.")],
        ToolOffer((WEATHER,), ToolMode.NONE),
        "none",
    )
    assert "Paris" in text
    assert calls == []
    assert all(not d.tool_calls for d in deltas)


async def test_a_tool_result_in_the_history_reaches_the_reply(vllm_engine: LLM) -> None:
    call = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
    history = [
        *ASK,
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", '{"temperature_c": 17, "sky": "sunny"}', tool_call_id="call_1"),
    ]
    # the plain-text form of the call and its result (SmolLM2's template has no tools)
    text, calls, deltas = await collect(vllm_engine, history, None, "history")
    print(f"\nreply after the tool result: {text!r}")
    assert calls == []
    assert text.strip()
    assert len(deltas) > 1
    assert any(word in text.lower() for word in ("17", "sunny"))
    # and the same history with tools offered, a named call again
    offer = ToolOffer((WEATHER,), function="get_weather")
    _, calls, _ = await collect(vllm_engine, [*history, ChatMessage("user", "And in Rome?")], offer, "again")
    assert len(calls) == 1 and check_arguments(calls[0], WEATHER)["city"]


async def test_a_prefill_of_a_history_with_tool_calls_warms(vllm_engine: LLM) -> None:
    call = ToolCall("call_2", "get_weather", '{"city": "Oslo"}')
    history = [
        *ASK,
        ChatMessage("assistant", "Let me look.", tool_calls=(call,)),
        ChatMessage("tool", "rain, 4 C", tool_call_id="call_2"),
        ChatMessage("user", "Should I take an umbrella"),
    ]
    result = await vllm_engine.prefill(history, request_id("prefill"))
    assert result.outcome == "warmed", result.error
    assert result.prompt_tokens > 0


@pytest.mark.parametrize(
    "schema",
    [
        '{"type":"object","properties":{"x":{"$ref":"#/nowhere"}}}',
        '{"type":"object","properties":{"x":{"type":"no-such-type"}}}',
        '{"type":"object","properties":{"x":{"type":"string","pattern":"(("}}}',
        '"not an object"',
    ],
)
async def test_a_broken_schema_is_a_clear_error_or_held_and_the_engine_lives(
    vllm_engine: LLM, schema: str
) -> None:
    broken = ToolSpec("f", "A function with a broken schema.", schema)
    try:
        _, calls, _ = await collect(vllm_engine, ASK, ToolOffer((broken,), function="f"), "broken")
    except EngineError as exc:
        print(f"\nbroken schema {schema}: {exc}")
        assert not exc.retryable
    else:
        print(f"\nbroken schema {schema}: {calls}")
        assert [c.name for c in calls] == ["f"]
    assert vllm_engine.health().ok
    text, _, _ = await collect(vllm_engine, [ChatMessage("user", "Say hello.")], None, "alive")
    assert text.strip()


NO_ARGUMENTS = ToolSpec("get_date", "Get today's date.", '{"type":"object","properties":{},"required":[]}')


@pytest.mark.parametrize(
    "offer",
    [
        ToolOffer((WEATHER, NO_ARGUMENTS), function="get_date"),
        ToolOffer((NO_ARGUMENTS,), ToolMode.REQUIRED),
        ToolOffer((NO_ARGUMENTS, TIME), ToolMode.REQUIRED),
    ],
    ids=["named", "required", "required-of-two"],
)
async def test_a_tool_without_arguments_is_called_once(
    vllm_engine: LLM, config: Config, offer: ToolOffer
) -> None:
    """Once SmolLM2, allowed a list of parameterless calls, repeated it until max_tokens: a
    call with one possible value is now given without generating, and such a call is alone."""
    ask = [ChatMessage("system", DEFAULT_SYSTEM_PROMPT), ChatMessage("user", "What is the date today?")]
    text, calls, deltas = await collect(vllm_engine, ask, offer, "no-arguments")
    print(f"\n{offer.function or offer.mode}: {sum(d.num_tokens for d in deltas)} tokens, {calls}")
    assert text == ""
    assert len(calls) == 1
    if calls[0].name == "get_date":
        assert json.loads(calls[0].arguments) == {}
    else:  # the model chose the other tool: its arguments per its schema
        check_arguments(calls[0], TIME)
    assert sum(d.num_tokens for d in deltas) < config.llm.max_tokens  # the reply ended by itself
    assert vllm_engine.unfinished_requests() == 0
