"""Function calls on /v1/realtime (pure): the reply's ToolCallStreamed / ToolCallDone
events -> function_call output items in the GA order, parallel calls, malformed calls,
and function_call_output -> the LLM's tool messages.

The session is played by hand (its typed events, in the order the real one emits them);
every server event is validated against the openai SDK's own models.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from realtime_sdk import validate_server_event
from realtime_support import PROFILE, TOOLS_PROFILE

from llm.base import ChatMessage, ToolCall, ToolMode, ToolOffer, ToolSpec
from voice_pipeline import events as ev
from voice_pipeline.config import BudgetConfig, Config
from voice_pipeline.conversation.steering import ReplyRequest
from voice_pipeline.ledger.ledger import TurnLedger
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.realtime.bridge import RealtimeBridge
from voice_pipeline.realtime.calls import call_error
from voice_pipeline.realtime.client_events import CreateItem, ResponseParams
from voice_pipeline.realtime.errors import ErrorCode, ErrorType, RealtimeClientError
from voice_pipeline.realtime.event_json import encode
from voice_pipeline.realtime.ids import Ids
from voice_pipeline.realtime.items import (
    NO_ID,
    FunctionCall,
    FunctionCallOutput,
    InputText,
    ItemStatus,
    Message,
    OutputText,
    Role,
)
from voice_pipeline.realtime.response_state import ResponseState
from voice_pipeline.realtime.server_events import (
    ErrorOccurred,
    FunctionArgumentsDelta,
    FunctionArgumentsDone,
    OutputItemAdded,
    OutputItemDone,
    ResponseDone,
    ResponseStatus,
    ServerEvent,
    TurnLatencyMeasured,
)
from voice_pipeline.realtime.session_config import ServerProfile, SessionBase
from voice_pipeline.realtime.session_parse import parse_session
from voice_pipeline.realtime.tools import ToolChoiceFunction, ToolChoiceMode

CFG = Config()
BASE = SessionBase.of(CFG)
T = 1_000_000_000
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "the weather",
    "parameters": WEATHER_SCHEMA,
}
CLOCK = {"type": "function", "name": "clock", "description": "the time", "parameters": {"type": "object"}}
NAMED = {"type": "function", "name": "get_weather"}


def bridge(profile: ServerProfile = PROFILE, **session: Any) -> RealtimeBridge:
    b = RealtimeBridge(profile, BASE, Ids("t"), origin_ns=0)
    b.update(parse_session({"type": "realtime", "output_modalities": ["text"], **session}))
    return b


def record(turn_id: int, *, interrupted: bool = False) -> TurnRecord:
    ledger = TurnLedger(turn_id, BudgetConfig())
    return ledger.finish(
        user_text="", assistant_text="", heard_text="", interrupted=interrupted, audio_heard_s=0.0
    )


def checked(events: list[ServerEvent]) -> list[str]:
    for n, e in enumerate(events):
        if not isinstance(e, TurnLatencyMeasured):
            validate_server_event(encode(e, f"event_{n}"))
    return [e.TYPE for e in events]


def respond(
    b: RealtimeBridge, turn_id: int = 1, params: ResponseParams | None = None
) -> tuple[list[ServerEvent], ReplyRequest, ResponseState]:
    events, request, response = b.create_response(params or ResponseParams())
    b.bind(turn_id, response)
    return events + b.on_event(ev.ReplyStarted(turn_id, T)), request, response


def streamed(turn_id: int, index: int, call_id: str, name: str, *pieces: str) -> list[ev.Event]:
    return [ev.ToolCallStreamed(turn_id, T, index, call_id, name, p) for p in pieces]


def play(b: RealtimeBridge, *events: ev.Event) -> list[ServerEvent]:
    out: list[ServerEvent] = []
    for e in events:
        out += b.on_event(e)
    return out


def generated(turn_id: int = 1) -> list[ev.Event]:
    return [ev.ReplyGenerated(turn_id, T, 7, False), ev.TurnCompleted(turn_id, T, record(turn_id))]


CALL_EVENTS = [
    "response.output_item.added",
    "conversation.item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "conversation.item.done",
]


def test_a_forced_call_reaches_the_llm_and_streams_as_a_function_call_item() -> None:
    b = bridge(tools=[WEATHER], tool_choice=NAMED)  # the default model: a forced call is fine
    events, request, _ = respond(b)
    assert request.options.tools == ToolOffer(
        (
            ToolSpec(
                "get_weather",
                "the weather",
                '{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}',
            ),
        ),
        ToolMode.REQUIRED,
        "get_weather",
    )
    events += play(
        b,
        *streamed(1, 0, "call_a", "get_weather", '{"city": ', '"Paris"}'),
        ev.ToolCallDone(1, T, 0, "call_a", "get_weather", '{"city": "Paris"}'),
        *generated(),
    )
    assert checked(events) == [
        "response.created",
        *CALL_EVENTS,
        "response.done",
        "voice_pipeline.turn.latency",
    ]
    added = next(e for e in events if isinstance(e, OutputItemAdded))
    assert isinstance(added.item, FunctionCall)
    assert (added.item.status, added.item.arguments, added.item.call_id, added.item.name) == (
        ItemStatus.IN_PROGRESS,
        "",
        "call_a",
        "get_weather",
    )
    deltas = [e for e in events if isinstance(e, FunctionArgumentsDelta)]
    assert [(d.delta, d.call_id, d.item_id, d.output_index) for d in deltas] == [
        ('{"city": ', "call_a", added.item.id, 0),
        ('"Paris"}', "call_a", added.item.id, 0),
    ]
    args_done = next(e for e in events if isinstance(e, FunctionArgumentsDone))
    assert (args_done.arguments, args_done.name) == ('{"city": "Paris"}', "get_weather")
    final = FunctionCall(added.item.id, "call_a", "get_weather", '{"city": "Paris"}', ItemStatus.COMPLETED)
    item_done = next(e for e in events if isinstance(e, OutputItemDone))
    done = next(e for e in events if isinstance(e, ResponseDone))
    assert item_done.item == final and done.response.output == (final,)  # no message item
    assert done.response.status is ResponseStatus.COMPLETED
    assert b.conversation.items == (final,)


def test_parallel_calls_are_items_of_their_own() -> None:
    b = bridge(profile=TOOLS_PROFILE, tools=[WEATHER, CLOCK], tool_choice="auto")
    events, request, _ = respond(b)
    assert request.options.tools is not None and request.options.tools.mode is ToolMode.AUTO
    events += play(
        b,
        *streamed(1, 0, "call_a", "get_weather", '{"city": ', '"Paris"}'),
        *streamed(1, 1, "call_b", "clock", "{}"),  # a whole call in one piece
        ev.ToolCallDone(1, T, 0, "call_a", "get_weather", '{"city": "Paris"}'),
        ev.ToolCallDone(1, T, 1, "call_b", "clock", "{}"),
        *generated(),
    )
    checked(events)
    added = [e for e in events if isinstance(e, OutputItemAdded)]
    done_items = [e for e in events if isinstance(e, OutputItemDone)]
    assert [(e.output_index, e.item.id) for e in added] == [(e.output_index, e.item.id) for e in done_items]
    assert [e.output_index for e in added] == [0, 1]
    assert len({e.item.id for e in added}) == 2
    # item 0 is done before item 1 is added: items never interleave
    kinds = [(type(e).__name__, getattr(e, "output_index", None)) for e in events]
    assert kinds.index(("OutputItemDone", 0)) < kinds.index(("OutputItemAdded", 1))
    calls = [(i.call_id, i.name, i.arguments) for i in b.conversation.items if isinstance(i, FunctionCall)]
    assert calls == [("call_a", "get_weather", '{"city": "Paris"}'), ("call_b", "clock", "{}")]
    response = next(e for e in events if isinstance(e, ResponseDone)).response
    assert [i.call_id for i in response.output if isinstance(i, FunctionCall)] == ["call_a", "call_b"]
    assert not any(isinstance(e, ErrorOccurred) for e in events)


def test_parallel_call_order_is_exact() -> None:
    b = bridge(profile=TOOLS_PROFILE, tools=[WEATHER, CLOCK], tool_choice="auto")
    events, _, _ = respond(b)
    events += play(
        b,
        *streamed(1, 0, "call_a", "get_weather", '{"city": "Paris"}'),
        *streamed(1, 1, "call_b", "clock", "{}"),
        ev.ToolCallDone(1, T, 0, "call_a", "get_weather", '{"city": "Paris"}'),
        ev.ToolCallDone(1, T, 1, "call_b", "clock", "{}"),
        *generated(),
    )
    one = [
        "response.output_item.added",
        "conversation.item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "conversation.item.done",
    ]
    assert checked(events) == ["response.created", *one, *one, "response.done", "voice_pipeline.turn.latency"]


@pytest.mark.parametrize(
    ("name", "arguments", "says"),
    [
        ("get_weather", '{"city": Par', "not valid JSON"),
        ("get_weather", '["Paris"]', "not a JSON object"),
        ("", "{}", "did not offer"),
        ("get_time", "{}", "did not offer"),
    ],
    ids=["broken JSON", "not an object", "no name", "unknown function"],
)
def test_a_malformed_call_completes_as_written_then_an_error_and_the_session_goes_on(
    name: str, arguments: str, says: str
) -> None:
    b = bridge(tools=[WEATHER], tool_choice="required")
    events, _, _ = respond(b)
    events += play(
        b,
        *streamed(1, 0, "call_x", name, arguments),
        ev.ToolCallDone(1, T, 0, "call_x", name, arguments),
        *generated(),
    )
    types = checked(events)
    assert types[types.index("conversation.item.done") + 1 :] == [
        "error",
        "response.done",
        "voice_pipeline.turn.latency",
    ]
    error = next(e for e in events if isinstance(e, ErrorOccurred)).error
    assert (error.code, error.type) == (ErrorCode.INVALID_FUNCTION_CALL, ErrorType.SERVER)
    assert "call_x" in error.message and says in error.message
    done = next(e for e in events if isinstance(e, ResponseDone)).response
    assert done.status is ResponseStatus.COMPLETED
    assert done.output == (FunctionCall(done.output[0].id, "call_x", name, arguments, ItemStatus.COMPLETED),)
    # the session goes on: the client answers the call, the next response runs
    b.create_item(CreateItem(FunctionCallOutput(NO_ID, "call_x", '{"error": "bad arguments"}')))
    more, request, _ = respond(b, 2, ResponseParams(tool_choice=ToolChoiceMode.NONE))
    assert checked(more) == ["response.created"] and request.options.tools is None
    assert request.messages[-1] == ChatMessage("tool", '{"error": "bad arguments"}', tool_call_id="call_x")


def test_a_call_s_last_words_and_interleaved_pieces() -> None:
    b = bridge(profile=TOOLS_PROFILE, tools=[WEATHER, CLOCK], tool_choice="auto")
    events, _, _ = respond(b)
    events += play(
        b,
        *streamed(1, 0, "call_a", "get_weather", '{"city": '),
        *streamed(1, 1, "call_b", "clock", "{"),  # ends call_a's item: call_b is live
        *streamed(1, 0, "call_a", "get_weather", '"Oslo"}'),  # too late for call_a's item
        ev.ToolCallDone(1, T, 0, "call_a", "get_weather", '{"city": "Oslo"}'),
        ev.ToolCallDone(1, T, 1, "call_b", "clock", "{}"),  # "}" was never streamed: sent now
        ev.ToolCallDone(1, T, 1, "call_b", "clock", "{}"),  # told twice: nothing more
        *generated(),
    )
    checked(events)
    (error,) = [e.error for e in events if isinstance(e, ErrorOccurred)]
    assert "call_a" in error.message and "before the rest of its arguments" in error.message
    a, c = b.conversation.items
    assert isinstance(a, FunctionCall) and a.arguments == '{"city": '  # what the client was sent
    assert isinstance(c, FunctionCall) and c.arguments == "{}"
    deltas = [e.delta for e in events if isinstance(e, FunctionArgumentsDelta) and e.call_id == "call_b"]
    assert deltas == ["{", "}"]


def test_call_error() -> None:
    assert call_error("c", "f", '{"a": 1}', {"f"}) is None
    assert call_error("c", "f", "{}", {"f"}) is None
    error = call_error("c", "f", "{" * 100_000, {"f"})  # deep nesting: still an error, no crash
    assert error is not None and len(error.message) < 400


def test_words_then_a_call_the_message_first_then_the_call_whole() -> None:
    b = bridge(profile=TOOLS_PROFILE, tools=[WEATHER], tool_choice="auto")
    events, _, _ = respond(b)
    events += play(
        b,
        ev.AssistantTextStreamed(1, T, "Let me look."),
        *streamed(1, 0, "call_a", "get_weather", '{"city": ', '"Rome"}'),  # held: the message is open
        ev.ToolCallDone(1, T, 0, "call_a", "get_weather", '{"city": "Rome"}'),
        *generated(),
    )
    assert checked(events) == [
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.output_item.added",
        "conversation.item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
        "voice_pipeline.turn.latency",
    ]
    message, call = b.conversation.items
    assert isinstance(message, Message) and message.content == (OutputText("Let me look."),)
    assert isinstance(call, FunctionCall) and call.arguments == '{"city": "Rome"}'
    # the next request: the words and the call are one assistant message
    b.create_item(CreateItem(FunctionCallOutput(NO_ID, "call_a", '{"temperature_c": 21}')))
    _, request, _ = respond(b, 2)
    assert request.messages[-2:] == (
        ChatMessage(
            "assistant", "Let me look.", tool_calls=(ToolCall("call_a", "get_weather", '{"city": "Rome"}'),)
        ),
        ChatMessage("tool", '{"temperature_c": 21}', tool_call_id="call_a"),
    )


def test_function_call_outputs_reach_the_llm_as_tool_messages() -> None:
    b = bridge(instructions="You help.", tools=[WEATHER, CLOCK], tool_choice="required")
    b.create_item(CreateItem(Message(NO_ID, Role.USER, (InputText("Weather in Paris, and the time?"),))))
    _, request, _ = respond(b)
    assert request.messages == (
        ChatMessage("system", "You help."),
        ChatMessage("user", "Weather in Paris, and the time?"),
    )
    play(
        b,
        *streamed(1, 0, "call_a", "get_weather", '{"city": "Paris"}'),
        *streamed(1, 1, "call_b", "clock", "{}"),
        ev.ToolCallDone(1, T, 0, "call_a", "get_weather", '{"city": "Paris"}'),
        ev.ToolCallDone(1, T, 1, "call_b", "clock", "{}"),
        *generated(),
    )
    for call_id, output in (("call_b", '{"time": "noon"}'), ("call_a", '{"temperature_c": 17}')):
        b.create_item(CreateItem(FunctionCallOutput(NO_ID, call_id, output)))
    _, request, _ = respond(b, 2, ResponseParams(tool_choice=ToolChoiceMode.NONE))
    calls = (ToolCall("call_a", "get_weather", '{"city": "Paris"}'), ToolCall("call_b", "clock", "{}"))
    assert request.messages == (
        ChatMessage("system", "You help."),
        ChatMessage("user", "Weather in Paris, and the time?"),
        ChatMessage("assistant", "", tool_calls=calls),
        ChatMessage("tool", '{"time": "noon"}', tool_call_id="call_b"),
        ChatMessage("tool", '{"temperature_c": 17}', tool_call_id="call_a"),
    )
    assert request.options.tools is None  # "none": the tools are not offered


def test_a_cancelled_response_leaves_no_call_in_progress() -> None:
    b = bridge(tools=[WEATHER], tool_choice=NAMED)
    events, _, _ = respond(b)
    events += play(b, *streamed(1, 0, "call_a", "get_weather", '{"ci'))
    events += b.on_event(ev.TurnCompleted(1, T, record(1, interrupted=True)))
    assert checked(events)[-3:] == ["conversation.item.done", "response.done", "voice_pipeline.turn.latency"]
    (call,) = b.conversation.items
    assert isinstance(call, FunctionCall) and call.status is ItemStatus.INCOMPLETE
    done = next(e for e in events if isinstance(e, ResponseDone)).response
    assert done.status is ResponseStatus.CANCELLED and done.output == (call,)


def test_a_voice_turn_is_offered_the_session_s_tools() -> None:
    b = bridge(tools=[WEATHER], tool_choice="required")
    offer = b.steering().reply.tools
    assert offer is not None and offer.mode is ToolMode.REQUIRED and offer.function is None
    events = play(
        b,
        ev.ReplyStarted(1, T),  # a reply the server started itself
        *streamed(1, 0, "call_a", "get_weather", '{"city": "Oslo"}'),
        ev.ToolCallDone(1, T, 0, "call_a", "get_weather", '{"city": "Oslo"}'),
        *generated(),
    )
    types = checked(events)
    assert types[0] == "response.created" and "response.function_call_arguments.done" in types


@pytest.mark.parametrize(
    ("profile", "choice", "refused"),
    [
        (PROFILE, ToolChoiceMode.AUTO, True),
        (PROFILE, ToolChoiceMode.REQUIRED, False),
        (PROFILE, ToolChoiceFunction("get_weather"), False),
        (PROFILE, ToolChoiceMode.NONE, False),
        (TOOLS_PROFILE, ToolChoiceMode.AUTO, False),
    ],
    ids=["default auto", "default required", "default named", "default none", "tool model auto"],
)
def test_a_response_s_own_tools(profile: ServerProfile, choice: Any, refused: bool) -> None:
    b = RealtimeBridge(profile, BASE, Ids("t"), origin_ns=0)
    tools = parse_session({"type": "realtime", "tools": [WEATHER], "tool_choice": "none"}).tools
    assert isinstance(tools, tuple)
    params = ResponseParams(tools=tools, tool_choice=choice)
    if refused:
        with pytest.raises(RealtimeClientError) as info:
            b.create_response(params)
        assert (info.value.error.code, info.value.error.param) == (
            ErrorCode.TOOLS_UNSUPPORTED,
            "response.tools",
        )
        return
    _, request, _ = b.create_response(params)
    assert (request.options.tools is None) == (choice is ToolChoiceMode.NONE)


# ---------------------------------------------------------------- any order of the reply's events

_CALL_NAMES = ("get_weather", "clock", "", "nope")
_ARGS = st.sampled_from(['{"city": "Paris"}', "{", "}", "[1]", "", "null", '"x"', "{}", "\x00", "{" * 40])
_STEP = st.one_of(
    st.tuples(st.just("words"), st.sampled_from(["Hm.", "Let me look.", ""])),
    st.tuples(st.just("piece"), st.integers(0, 2), st.sampled_from(_CALL_NAMES), _ARGS),
    st.tuples(st.just("done"), st.integers(0, 2), st.sampled_from(_CALL_NAMES), _ARGS),
)
_ENDS = ("completed", "limit", "interrupted", "failed", "cancelled")


def _reply_events(audio: bool, steps: list[tuple[Any, ...]], end: str) -> list[ev.Event]:
    out: list[ev.Event] = []
    for step in steps:
        match step:
            case ("words", text):
                out.append(
                    ev.ClauseSynthesized(1, T, text, 2400) if audio else ev.AssistantTextStreamed(1, T, text)
                )
            case ("piece", index, name, args):
                out.append(ev.ToolCallStreamed(1, T, index, f"call_{index}", name, args))
            case ("done", index, name, args):
                out.append(ev.ToolCallDone(1, T, index, f"call_{index}", name, args))
    if end in ("completed", "limit"):
        out.append(ev.ReplyGenerated(1, T, 5, end == "limit"))
    if end == "failed":
        out.append(ev.TurnFailed(1, T, "llm", "boom", False))
    out.append(ev.TurnCompleted(1, T, record(1, interrupted=end in ("interrupted", "cancelled"))))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    audio=st.booleans(),
    choice=st.sampled_from(["auto", "required"]),
    steps=st.lists(_STEP, max_size=12),
    end=st.sampled_from(_ENDS),
)
def test_any_order_of_call_events_keeps_the_protocol(
    audio: bool, choice: str, steps: list[tuple[Any, ...]], end: str
) -> None:
    """Whatever the reply streams (words, pieces and ends of calls, in any order, broken or
    not) and however it ends: events of the SDK's shape, items one after the other, none
    left in progress, an error per unusable call, and the next response runs."""
    modality = ["audio"] if audio else ["text"]
    b = bridge(profile=TOOLS_PROFILE, tools=[WEATHER, CLOCK], tool_choice=choice, output_modalities=modality)
    events, _, _ = respond(b)
    events += play(b, *_reply_events(audio, steps, end))
    checked(events)
    open_items: list[int] = []
    indexes: list[int] = []
    for e in events:
        if isinstance(e, OutputItemAdded):
            assert not open_items, "items interleave"
            open_items.append(e.output_index)
            indexes.append(e.output_index)
        elif isinstance(e, OutputItemDone):
            assert open_items == [e.output_index]
            open_items.clear()
    assert indexes == list(range(len(indexes)))
    (done,) = [e for e in events if isinstance(e, ResponseDone)]
    after = events[events.index(done) + 1 :]  # (a cut item's truncation, the latency record)
    kinds = (OutputItemAdded, OutputItemDone, FunctionArgumentsDelta, FunctionArgumentsDone, ErrorOccurred)
    assert not [e for e in after if isinstance(e, kinds)]
    assert all(i.status is not ItemStatus.IN_PROGRESS for i in done.response.output)
    assert all(i.status is not ItemStatus.IN_PROGRESS for i in b.conversation.items)
    calls = [i for i in done.response.output if isinstance(i, FunctionCall)]
    assert len({c.call_id for c in calls}) == len(calls)
    for e in events:
        if isinstance(e, ErrorOccurred):
            assert e.error.code is ErrorCode.INVALID_FUNCTION_CALL
    more, _, _ = respond(b, 2, ResponseParams(tool_choice=ToolChoiceMode.NONE))
    assert checked(more) == ["response.created"]
