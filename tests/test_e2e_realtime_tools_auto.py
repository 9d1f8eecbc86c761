"""``tool_choice: "auto"`` on /v1/realtime end to end: the tool-capable model
(Qwen2.5-Coder-0.5B-Instruct, ``llm.model: qwen2.5-coder-0.5b``, prepared by
``voice-pipeline models --tools-model``), the official openai SDK as the client.

The model chooses by itself to call the function; its call is parsed from its text
and streamed as a ``function_call`` item; the client answers with a
``function_call_output`` and the model's next reply uses the result.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rtclient import realtime, user_message
from servers import running_server
from tool_fixtures import WEATHER_FUNCTION as WEATHER

from llm.base import LLM
from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.server.app import VoiceServer

pytestmark = pytest.mark.real_models


@pytest.fixture
async def tools_srv(
    engines: Engines, config: Config, tools_llm: LLM, tools_model_dir: Path
) -> AsyncIterator[VoiceServer]:
    """The server with the tool-capable model (the other engines are the shared ones)."""
    llm = dataclasses.replace(config.llm, model="qwen2.5-coder-0.5b", model_path=str(tools_model_dir))
    served = dataclasses.replace(engines, llm=tools_llm)
    async with running_server(served, dataclasses.replace(config, llm=llm)) as srv:
        yield srv


async def test_the_tool_capable_model_calls_a_function_by_itself(tools_srv: VoiceServer) -> None:
    async with realtime(tools_srv) as rt:
        created = await rt.wait_type("session.created")
        assert "qwen" in created.session.model.lower()
        await rt.send({
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["text"],
                "tools": [WEATHER],
                "tool_choice": "auto",
            },
        })  # fmt: skip
        updated = await rt.wait_type("session.updated")
        assert updated.session.tool_choice == "auto"
        since = len(rt.events)
        question = user_message("What is the weather in Paris?")
        await rt.send({"type": "conversation.item.create", "item": question})
        await rt.wait_type("conversation.item.done", since=since)
        since = len(rt.events)
        await rt.send({"type": "response.create"})
        done = await rt.wait_type("response.done", since=since)
        assert done.response.status == "completed", done.response.status_details
        assert not rt.of("error", since), rt.of("error", since)
        calls = [item for item in done.response.output if item.type == "function_call"]
        assert [c.name for c in calls] == ["get_weather"], done.response.output
        (call,) = calls
        arguments = json.loads(call.arguments)
        city = arguments.get("city") if isinstance(arguments, dict) else None
        assert isinstance(city, str) and "paris" in city.lower(), call.arguments
        args_done = rt.of("response.function_call_arguments.done", since)
        assert [(a.call_id, a.arguments) for a in args_done] == [(call.call_id, call.arguments)]

        output = json.dumps({"city": "Paris", "temperature_c": 17})
        since = len(rt.events)
        await rt.send({
            "type": "conversation.item.create",
            "item": {"type": "function_call_output", "call_id": call.call_id, "output": output},
        })  # fmt: skip
        await rt.wait_type("conversation.item.done", since=since)
        since = len(rt.events)
        # words now ("none": no tools offered; with "auto" this small model called again)
        await rt.send({"type": "response.create", "response": {"tool_choice": "none"}})
        done = await rt.wait_type("response.done", since=since)
        assert done.response.status in ("completed", "incomplete"), done.response.status_details
        text = "".join(e.delta for e in rt.of("response.output_text.delta", since))
        assert [item.type for item in done.response.output] == ["message"], done.response.output
        print(f"the answer after the result: {text!r}")
        assert "17" in text and not text.lstrip().startswith(("{", "[")), text  # words, not JSON
