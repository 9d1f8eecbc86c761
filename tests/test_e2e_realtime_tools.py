"""Function calls on /v1/realtime end to end: the real default model (SmolLM2-135M, whose
chat template cannot call tools), the official openai SDK as the client.

A named ``tool_choice`` makes any model call the function: the engine constrains the
reply to the arguments' JSON schema (vLLM structured outputs). The client runs the
function, sends a ``function_call_output`` and asks for the next response, which reads
the call and its output as tool messages.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator

import pytest
from rtclient import pcm16, realtime, user_message
from servers import running_server
from speech import concat, espeak, silence
from tool_fixtures import WEATHER_FUNCTION as WEATHER

from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.server.app import VoiceServer

pytestmark = pytest.mark.real_models

RATE = 24000


@pytest.fixture
async def srv(engines: Engines, config: Config) -> AsyncIterator[VoiceServer]:
    async with running_server(engines, config) as server:
        yield server


async def test_a_named_tool_choice_round_trip_on_the_default_model(srv: VoiceServer) -> None:
    async with realtime(srv) as rt:
        await rt.wait_type("session.created")
        await rt.send({
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["text"],
                "instructions": "You are a weather assistant. Use the tool results to answer.",
                "tools": [WEATHER],
                "tool_choice": {"type": "function", "name": "get_weather"},
            },
        })  # fmt: skip
        updated = await rt.wait_type("session.updated")
        assert [t.name for t in updated.session.tools] == ["get_weather"]
        question = user_message("What is the weather in Paris?")
        since = len(rt.events)
        await rt.send({"type": "conversation.item.create", "item": question})
        await rt.wait_type("conversation.item.done", since=since)
        since = len(rt.events)
        await rt.send({"type": "response.create"})
        done = await rt.wait_type("response.done", since=since)
        assert done.response.status == "completed", done.response.status_details
        assert not rt.of("error", since), rt.of("error", since)
        (call,) = done.response.output  # only the call: no message, no audio
        assert (call.type, call.name, call.status) == ("function_call", "get_weather", "completed")
        arguments = json.loads(call.arguments)
        assert isinstance(arguments, dict) and isinstance(arguments.get("city"), str), call.arguments
        # the GA events of the call, in order, with the same ids
        kinds = [k for k, _ in itertools.groupby(e.type for e in rt.events[since:])]  # deltas as one
        order = [
            "response.created",
            "response.output_item.added",
            "conversation.item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "conversation.item.done",
            "response.done",
        ]
        assert kinds[: kinds.index("response.done") + 1] == order, kinds
        added = rt.of("response.output_item.added", since)[0]
        item = added.item
        assert (item.type, item.status, item.arguments) == ("function_call", "in_progress", "")
        assert added.item.call_id == call.call_id and added.item.id == call.id
        deltas = rt.of("response.function_call_arguments.delta", since)
        assert "".join(d.delta for d in deltas) == call.arguments
        assert {(d.item_id, d.call_id, d.output_index) for d in deltas} == {(call.id, call.call_id, 0)}
        args_done = rt.of("response.function_call_arguments.done", since)[0]
        assert (args_done.arguments, args_done.name) == (call.arguments, "get_weather")

        # the client runs the function and answers; the next response reads the result
        output = json.dumps({"city": arguments["city"], "temperature_c": 17})
        since = len(rt.events)
        await rt.send({
            "type": "conversation.item.create",
            "item": {"type": "function_call_output", "call_id": call.call_id, "output": output},
        })  # fmt: skip
        await rt.wait_type("conversation.item.done", since=since)
        since = len(rt.events)
        await rt.send({"type": "response.create", "response": {"tool_choice": "none"}})
        done = await rt.wait_type("response.done", since=since)
        assert done.response.status in ("completed", "incomplete"), done.response.status_details
        text = "".join(e.delta for e in rt.of("response.output_text.delta", since))
        assert done.response.output[0].type == "message" and text
        assert "17" in text, text


async def test_a_spoken_turn_is_answered_with_a_forced_call(srv: VoiceServer) -> None:
    """Turn detection's own responses are offered the session's tools (audio modality: a
    response that only calls has no audio)."""
    async with realtime(srv) as rt:
        await rt.wait_type("session.created")
        await rt.send({
            "type": "session.update",
            "session": {"type": "realtime", "tools": [WEATHER], "tool_choice": "required"},
        })  # fmt: skip
        await rt.wait_type("session.updated")
        rt.microphone()
        since = len(rt.events)
        await rt.say(pcm16(concat(silence(0.3, RATE), espeak("What is the weather in Berlin?", RATE))))
        done = await rt.wait_type("response.done", since=since)
        assert done.response.status == "completed", done.response.status_details
        (call,) = done.response.output
        assert (call.type, call.name) == ("function_call", "get_weather")
        arguments = json.loads(call.arguments)
        assert isinstance(arguments, dict) and isinstance(arguments.get("city"), str), call.arguments
        assert not rt.of("response.output_audio.delta", since) and not rt.of("error", since)
