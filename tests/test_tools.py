"""Server-side tools, the pure parts: schemas from type hints and docstrings, the registry's
errors, arguments checked against a schema, the loop's offers and each call's state in
the history, and the ledger's stages of a turn with a tool (they add up)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Literal

import pytest

from llm.base import ChatMessage, ToolCall, ToolMode, ToolOffer, ToolSpec
from voice_pipeline.config import BudgetConfig, Config, load_config
from voice_pipeline.conversation.history import History, remember
from voice_pipeline.errors import ConfigError, EngineError
from voice_pipeline.ledger.ledger import CRITICAL_PATH, STAGES, TOOL_PATH, TOTAL, Mark, TurnLedger, stages_of
from voice_pipeline.ledger.records import Span, StageName
from voice_pipeline.ledger.report import format_turn
from voice_pipeline.preflight import check_tools
from voice_pipeline.tools.loop import (
    CANCELLED,
    STILL_RUNNING,
    CallState,
    ToolOutcome,
    ToolRound,
    another_round,
    next_offer,
    repeats,
)
from voice_pipeline.tools.registry import load_tool, load_tools
from voice_pipeline.tools.schema import SchemaError, check_arguments, describe, function_schema


def forecast(
    city: str,
    days: int,
    detail: float = 1.0,
    metric: bool = True,
    unit: Literal["c", "f"] = "c",
    tags: list[str] | None = None,
    hours: tuple[int, ...] = (),
) -> str:
    """Get the forecast.

    More text that is not the description.

    Args:
        city: the city's name,
            over two lines
        days (int): how many days
        unit: c or f

    Returns:
        the forecast
    """
    return city


def test_schema_from_type_hints_and_docstring() -> None:
    description, schema = function_schema(forecast, "forecast")
    assert description == "Get the forecast."
    props = schema["properties"]
    assert props["city"] == {"type": "string", "description": "the city's name, over two lines"}
    assert props["days"] == {"type": "integer", "description": "how many days"}
    assert props["detail"] == {"type": "number"}
    assert props["metric"] == {"type": "boolean"}
    assert props["unit"] == {"type": "string", "enum": ["c", "f"], "description": "c or f"}
    assert props["tags"] == {"type": ["array", "null"], "items": {"type": "string"}}
    assert props["hours"] == {"type": "array", "items": {"type": "integer"}}
    assert schema["required"] == ["city", "days"]
    assert schema["additionalProperties"] is False


def test_describe_without_args_section() -> None:
    assert describe("One line.\n\nMore.") == ("One line.", {})
    assert describe(None) == ("", {})


@pytest.mark.parametrize(
    ("hint", "message"),
    [(dict[str, int] | int, "unions"), (set[int], "cannot describe"), (Literal["a", 1], "Literal"),
     (tuple[int, str], "tuple")],
)  # fmt: skip
def test_types_that_cannot_be_described(hint: object, message: str) -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return x

    fn.__annotations__ = {"x": hint}
    with pytest.raises(SchemaError, match=message):
        function_schema(fn, "fn")


def test_registry_loads_tools_and_their_options() -> None:
    weather = load_tool("tool_fixtures:get_weather")
    assert weather.spec.name == "get_weather" and not weather.is_async and weather.cancel_on_interruption
    assert json.loads(weather.spec.parameters_json)["required"] == ["city"]
    booking = load_tool("tool_fixtures:finish_booking")
    assert booking.is_async and not booking.cancel_on_interruption
    assert load_tool("tool_fixtures:hangs").timeout_s == 0.05
    explicit = load_tool("tool_fixtures:explicit")
    assert json.loads(explicit.spec.parameters_json) == {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}  # fmt: skip
    reg = load_tools(("tool_fixtures:get_weather", "tool_fixtures:broken"))
    assert reg.offer("required") == ToolOffer(
        (weather.spec, load_tool("tool_fixtures:broken").spec), ToolMode.REQUIRED
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("tool_fixtures:untyped", "'x' has no type hint"),
        ("tool_fixtures:NOT_CALLABLE", "is a int, not a function"),
        ("no_such_module_here:fn", "cannot import 'no_such_module_here'"),
        ("tool_fixtures:missing", "has no 'missing'"),
        ("tool_fixtures", "not 'package.module:function'"),
    ],
)
def test_registry_errors_name_the_entry(entry: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        load_tool(entry)
    assert entry in str(err.value)


def test_two_tools_of_one_name_are_refused() -> None:
    with pytest.raises(ConfigError, match="both named 'get_weather'"):
        load_tools(("tool_fixtures:get_weather", "tool_fixtures:get_weather"))


def test_config_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "dialogue:\n  tools: [tool_fixtures:get_weather]\n  tool_choice: required\n"
        "  tool_timeout_s: 2.5\n  tool_filler_after_ms: 300\n  tool_max_rounds: 2\n"
    )
    d = load_config(path).dialogue
    assert (d.tools, d.tool_choice, d.tool_timeout_s, d.tool_filler_after_ms, d.tool_max_rounds) == (
        ("tool_fixtures:get_weather",), "required", 2.5, 300, 2)  # fmt: skip
    for bad in ("tool_choice: sometimes", "tool_max_rounds: 0", "tools: [nocolon]", "tool_timeout_s: 0"):
        path.write_text(f"dialogue:\n  {bad}\n")
        with pytest.raises(ConfigError):
            load_config(path)


SCHEMA = function_schema(forecast, "forecast")[1]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ('{"city": "Paris", "days": 2}', None),
        ('{"city": "Paris", "days": 2, "tags": null, "unit": "f"}', None),
        ("", "'city' is missing"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"city": "Paris"}', "'days' is missing"),
        ('{"city": 3, "days": 2}', "arguments.city: expected string"),
        ('{"city": "P", "days": true}', "arguments.days: expected integer"),
        ('{"city": "P", "days": 1, "unit": "k"}', "must be one of"),
        ('{"city": "P", "days": 1, "tags": [1]}', r"arguments.tags\[0\]: expected string"),
        ('{"city": "P", "days": 1, "mood": "x"}', "unknown argument 'mood'"),
    ],
)
def test_arguments_checked_against_the_schema(arguments: str, error: str | None) -> None:
    if error is None:
        assert check_arguments(arguments, SCHEMA)["city"] == "Paris"
    else:
        with pytest.raises(ValueError, match=error):
            check_arguments(arguments, SCHEMA)


def test_follow_up_offers() -> None:
    tools = (ToolSpec("f", "d"),)
    none = ToolOffer(tools, ToolMode.NONE)
    assert next_offer(ToolOffer(tools, ToolMode.REQUIRED), 1, 3) == none  # else it calls forever
    assert next_offer(ToolOffer(tools, function="f"), 1, 3) == none
    auto = ToolOffer(tools, ToolMode.AUTO)
    assert next_offer(auto, 1, 3) == auto
    assert next_offer(auto, 3, 3) == none  # the last round is words only
    assert next_offer(auto, 1, 3, repeated=True) == none  # it called again instead of answering
    first = ToolRound((ToolCall("a", "f", '{"x": 1}'),), (True,))
    assert repeats((ToolCall("b", "f", '{"x":  1}'),), [first])  # the same call, other spacing
    assert not repeats((ToolCall("b", "f", '{"x": 2}'),), [first])
    assert not repeats((), [first])


ONE_CALL = (ToolCall("a", "f", "{}"),)


@pytest.mark.parametrize(
    ("mode", "calls", "token_limit", "again"),
    [
        (ToolMode.AUTO, ONE_CALL, False, True),  # the calls run, the LLM is asked again
        (ToolMode.REQUIRED, ONE_CALL, False, True),
        (ToolMode.AUTO, (), False, False),  # it answered in words: the reply is done
        (ToolMode.NONE, ONE_CALL, False, False),  # words only: a call made anyway is not run
        (ToolMode.AUTO, ONE_CALL, True, False),  # the reply reached its token limit
    ],
)
def test_another_round_after_calls(
    mode: ToolMode, calls: tuple[ToolCall, ...], token_limit: bool, again: bool
) -> None:
    offer = ToolOffer((ToolSpec("f", "d"),), mode)
    assert another_round(offer, calls, token_limit=token_limit) is again


def test_a_required_round_with_no_call_fails() -> None:
    offer = ToolOffer((ToolSpec("f", "d"),), ToolMode.REQUIRED)
    with pytest.raises(EngineError, match="made no tool call") as info:
        another_round(offer, (), token_limit=True)
    assert info.value.retryable


CALLS = (ToolCall("c1", "a", "{}"), ToolCall("c2", "b", "{}"), ToolCall("c3", "c", "{}"))


def test_no_call_is_left_in_progress() -> None:
    rnd = ToolRound(CALLS, (True, True, False))
    rnd.finish(0, ToolOutcome("sunny"))
    assert not rnd.settled
    assert rnd.abandon() == [1]
    assert rnd.settled and rnd.states == [CallState.DONE, CallState.CANCELLED, CallState.DETACHED]
    msgs = rnd.messages()
    assert msgs[0] == ChatMessage("assistant", "", tool_calls=CALLS)
    assert [(m.role, m.tool_call_id) for m in msgs[1:]] == [("tool", "c1"), ("tool", "c2"), ("tool", "c3")]
    assert msgs[1].content == "sunny"
    assert json.loads(msgs[2].content) == {"error": CANCELLED}
    assert json.loads(msgs[3].content) == {"status": STILL_RUNNING}
    rnd.finish(2, ToolOutcome("booked"))  # the detached call lands
    rnd.finish(1, ToolOutcome("late"))  # a cancelled call stays cancelled
    assert [m.content for m in rnd.messages()[2:]] == [msgs[2].content, "booked"]


def test_history_keeps_the_exchange_and_resolves_a_late_result() -> None:
    hist = History("sys", 1024)
    rnd = ToolRound(CALLS[:1], (False,))
    rnd.abandon()
    remember(hist, "book it", "", cut=True, tools=rnd.messages())
    assert [m.role for m in hist.messages] == ["user", "assistant", "tool"]
    version = hist.version
    hist.resolve("c1", "booked for Ann")
    assert hist.messages[-1] == ChatMessage("tool", "booked for Ann", tool_call_id="c1")
    assert hist.version == version + 1
    hist.resolve("gone", "x")  # a call whose turn was dropped: nothing happens
    request = hist.request("and then?")
    assert [m.role for m in request] == ["system", "user", "assistant", "tool", "user"]


def _tool_turn(led: TurnLedger, clause_before_tool: bool = False) -> None:
    t = 1_000_000_000
    marks = [(Mark.SPEECH_END, 0), (Mark.ENDPOINT, 300), (Mark.TRANSCRIPT_FINAL, 340),
             (Mark.LLM_FIRST_TOKEN, 420), (Mark.TOOL_START, 700), (Mark.TOOL_DONE, 1650),
             (Mark.FIRST_CLAUSE, 1900), (Mark.TTS_FIRST_AUDIO, 2000),
             (Mark.FIRST_AUDIO_SENT, 2010)]  # fmt: skip
    for mark, ms in marks:
        if clause_before_tool and mark is Mark.FIRST_CLAUSE:
            ms = 600
        led.mark(mark, t + ms * 1_000_000)


def test_a_tool_turn_s_stages_add_up_to_voice_to_voice() -> None:
    for a, b in itertools.pairwise(TOOL_PATH):
        assert a.end is b.start
    assert TOOL_PATH[0].start is TOTAL.start and TOOL_PATH[-1].end is TOTAL.end
    led = TurnLedger(1, BudgetConfig(tool_ms=500))
    _tool_turn(led)
    stages = led.stages_ms()
    assert StageName.FIRST_CLAUSE not in stages
    assert (stages[StageName.TOOL_CALL], stages[StageName.TOOL], stages[StageName.TOOL_ANSWER]) == (
        280.0, 950.0, 250.0)  # fmt: skip
    assert sum(stages[s.name] for s in TOOL_PATH) == stages[StageName.VOICE_TO_VOICE] == 2010.0
    rec = led.finish(user_text="q", assistant_text="a", heard_text="a", interrupted=False, audio_heard_s=1)
    assert [b.stage for b in rec.budgets_broken] == [StageName.TOOL, StageName.VOICE_TO_VOICE]


def test_a_tool_after_the_first_clause_is_off_the_voice_to_voice_path() -> None:
    led = TurnLedger(1, BudgetConfig())
    _tool_turn(led, clause_before_tool=True)
    assert stages_of({Mark.TOOL_START: 2, Mark.FIRST_CLAUSE: 1}) == STAGES
    stages = led.stages_ms()
    assert StageName.TOOL not in stages
    assert sum(stages[s.name] for s in CRITICAL_PATH) == stages[StageName.VOICE_TO_VOICE]


def test_tool_compute_span_counts_in_the_critical_path() -> None:
    led = TurnLedger(1, BudgetConfig())
    _tool_turn(led)
    t = 1_000_000_000
    led.compute(Span.LLM, t + 340_000_000, t + 700_000_000)
    led.compute(Span.TOOL, t + 700_000_000, t + 1_650_000_000)
    led.compute(Span.LLM_ANSWER, t + 1_650_000_000, t + 1_900_000_000)
    rec = led.finish(user_text="q", assistant_text="a", heard_text="a", interrupted=False, audio_heard_s=1)
    assert rec.compute_ms[Span.TOOL] == 950.0 and rec.compute_ms[Span.LLM_ANSWER] == 250.0
    assert rec.as_dict()["stages_ms"]["tool"] == 950.0


def _model(tmp_path: Path, template: str) -> Path:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return tmp_path


def test_preflight_loads_the_tools_and_refuses_auto_without_a_tool_model(tmp_path: Path) -> None:
    cfg = _tools_config("tool_fixtures:get_weather", choice="auto")
    plain = _model(tmp_path, "{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(ConfigError, match=r"tool_choice: required .* or use a model that can call tools"):
        check_tools(cfg, plain)
    check_tools(_tools_config("tool_fixtures:get_weather", choice="required"), plain)  # any model
    check_tools(cfg, _model(tmp_path, "{% if tools %}{{ tools | tojson }}{% endif %}"))
    with pytest.raises(ConfigError, match="'tool_fixtures:untyped'"):
        check_tools(_tools_config("tool_fixtures:untyped", choice="required"), None)


def _tools_config(*tools: str, choice: str) -> Config:
    cfg = Config()
    return dataclasses.replace(
        cfg, dialogue=dataclasses.replace(cfg.dialogue, tools=tools, tool_choice=choice)
    )


def test_run_s_report_shows_the_tool_stages() -> None:
    stages = {"endpointing": 300, "asr_final": 1, "llm_first_token": 300, "tool_call": 1300, "tool": 2,
              "tool_answer": 200, "tts_first_audio": 160, "transport": 2, "voice_to_voice": 2265}  # fmt: skip
    text = format_turn(
        {"turn_id": 1, "user_text": "q", "assistant_text": "a", "stages_ms": stages}, BudgetConfig()
    )
    rows = [line.split()[0] for line in text.splitlines()[4:] if not line.strip().startswith("-")]
    assert rows == [*(s.name for s in TOOL_PATH), "voice_to_voice"]
