"""A server-side tool with the real models, on ``/ws`` and on a phone call (``/twilio``):
the spoken question goes through Whisper, the default SmolLM2 calls the tool
(``tool_choice: required``: structured outputs hold its arguments to the schema), the
tool's value goes back to it, and the spoken answer -- transcribed by Whisper again --
carries the value. The client is told the call and its result, and the turn's record
shows the tool's own time on the voice-to-voice path.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from typing import Any

import numpy as np
import pytest
import tool_fixtures
from servers import running_server, ws_url
from speech import espeak, normalize
from tool_fixtures import WEATHER
from twilioclient import twilio_caller
from wsclient import voice_client

from voice_pipeline.audio import resample, to_float32
from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.ledger.ledger import TOOL_PATH, TurnRecord
from voice_pipeline.telephony import mulaw
from voice_pipeline.telephony.twilio_connection import TwilioConnection
from voice_pipeline.tools.loop import CANCELLED

pytestmark = pytest.mark.real_models

QUESTION = "What is the weather in Paris today?"
OUT_RATE = 24000
#: the question and the tool's result in the prompt; SmolLM2-135M repeats a short
#: result it is told to repeat (the second round is words only)
SYSTEM = (
    "You are a voice assistant with a weather tool. When the tool gives you a result, "
    "answer by repeating the result in one short sentence."
)


def _with_tools(config: Config) -> Config:
    d = dataclasses.replace(
        config.dialogue,
        tools=("tool_fixtures:get_weather",),
        tool_choice="required",
        system_prompt=SYSTEM,
    )
    return dataclasses.replace(config, dialogue=d)


async def test_a_tool_s_value_is_spoken_on_ws(engines: Engines, config: Config, whisper: Any) -> None:
    async with running_server(engines, _with_tools(config)) as srv, voice_client(ws_url(srv)) as client:
        await client.start(output_sample_rate=OUT_RATE)
        client.start_microphone()
        client.say(espeak(QUESTION))
        latency = await client.wait_for(lambda m: m["type"] == "turn.latency", 240)
    turn = latency["turn_id"]
    calls = [m for m in client.of("tool.call") if m["turn_id"] == turn]
    assert [c["name"] for c in calls] == ["get_weather"]
    arguments = json.loads(calls[0]["arguments"])  # valid JSON, held to the schema
    assert isinstance(arguments.get("city"), str)
    results = [m for m in client.of("tool.result") if m["turn_id"] == turn]
    assert [(r["call_id"], r["output"], r["error"]) for r in results] == [
        (calls[0]["call_id"], WEATHER, None)
    ]

    record = latency["record"]
    pcm = np.concatenate([f.pcm for f in client.audio if f.header["turn_id"] == turn])
    heard = normalize(whisper.transcribe(resample(to_float32(pcm), OUT_RATE, 16000)).text)
    assert "17" in heard or "seventeen" in heard, (heard, record["assistant_text"])

    stages = record["stages_ms"]
    assert {s.name for s in TOOL_PATH} <= set(stages), stages  # the tool ran before the first words
    assert "first_clause" not in stages
    total = sum(stages[s.name] for s in TOOL_PATH)
    assert abs(total - stages["voice_to_voice"]) < 1.0  # the stages still add up (rounded to 0.1 ms)
    assert record["critical_path"]["compute_ms"]["tool"] >= 0


def _first_record(connections: Any) -> TurnRecord | None:
    for conn in connections:
        if isinstance(conn, TwilioConnection) and conn.session and conn.session.ledger.records:
            return conn.session.ledger.records[0]
    return None


async def test_a_tool_s_value_is_spoken_on_a_phone_call(
    engines: Engines, config: Config, whisper: Any
) -> None:
    """The same through the Twilio Media Streams bridge: 8 kHz µ-law in and out."""
    token = "s3cret-token"
    async with (
        running_server(engines, _with_tools(config), twilio_token=token) as srv,
        twilio_caller(f"ws://127.0.0.1:{srv.port}/twilio") as caller,
    ):
        await caller.start(token)
        caller.say(espeak(QUESTION))
        async with asyncio.timeout(240):  # the call's first turn is recorded
            while (record := _first_record(srv.connections)) is None:  # noqa: ASYNC110 -- server state
                await asyncio.sleep(0.05)
        await caller.wait_until(lambda: len(caller.marks_echoed) == len(caller.of("mark")), 60)  # all played
    assert {s.name for s in TOOL_PATH} <= set(record.stages_ms), record.stages_ms  # the tool ran
    assert not record.failed and record.assistant_text
    pcm = mulaw.decode(b"".join(base64.b64decode(r.msg["media"]["payload"]) for r in caller.of("media")))
    heard = normalize(whisper.transcribe(resample(to_float32(pcm), 8000, 16000)).text)
    print(f"\nphone: asked {record.user_text!r}, said {record.assistant_text!r}, heard {heard!r}")
    assert "17" in heard or "seventeen" in heard, (heard, record.assistant_text)


#: long, so that the user's interruption lands while it plays (the tool is held meanwhile)
LONG_FILLER = "One moment please, I am looking that up for you right now, it will only take a few seconds."


@pytest.mark.parametrize("cancel", [True, False], ids=["cancelled", "finishes"])
async def test_barge_in_during_a_tool(engines: Engines, config: Config, cancel: bool) -> None:
    """The tool is held; its filler plays; the user speaks over it. A cancellable call is
    cancelled and says so; a call that must finish still reports its result afterwards."""
    tool_fixtures.gate = asyncio.Event()
    tool_fixtures.booked.clear()
    name = "slow_lookup" if cancel else "finish_booking"
    question = "Where is my order number five?" if cancel else "Book a table for Ann please."
    d = dataclasses.replace(
        config.dialogue, tools=(f"tool_fixtures:{name}",), tool_choice="required",
        tool_filler_after_ms=300, tool_filler_text=LONG_FILLER,
    )  # fmt: skip
    try:
        async with (
            running_server(engines, dataclasses.replace(config, dialogue=d)) as srv,
            voice_client(ws_url(srv)) as client,
        ):
            await client.start(output_sample_rate=16000, reports=True)
            client.start_microphone()
            client.say(espeak(question))
            call = await client.wait_for(lambda m: m["type"] == "tool.call", 240)
            turn = call["turn_id"]
            assert call["name"] == name
            await client.wait_for(lambda m: m["type"] == "assistant.audio" and m["turn_id"] == turn, 60)
            # past the continuation gap from the user's end of speech (before the filler's
            # first audio), so that speaking is a barge-in and not more of the question on
            # any machine (on a Zen 5 EPYC the filler came within the gap)
            await asyncio.sleep(config.turn.continuation_max_gap_ms / 1000)
            client.say(espeak("Stop, never mind, forget it."))
            await client.wait_for(lambda m: m["type"] == "reply.interrupted" and m["turn_id"] == turn, 60)
            latency = await client.wait_for(
                lambda m: m["type"] == "turn.latency" and m["turn_id"] == turn, 60
            )
            assert latency["record"]["interrupted"]
            if cancel:
                result = await client.wait_for(
                    lambda m: m["type"] == "tool.result" and m["turn_id"] == turn, 30
                )
                assert result["call_id"] == call["call_id"] and result["error"] == CANCELLED
            else:
                assert not [m for m in client.of("tool.result") if m["turn_id"] == turn]  # still running
                tool_fixtures.gate.set()  # the tool finishes after its turn
                result = await client.wait_for(
                    lambda m: m["type"] == "tool.result" and m["turn_id"] == turn, 30
                )
                assert result["call_id"] == call["call_id"] and result["error"] is None
                assert result["output"].startswith("booked for") and tool_fixtures.booked
    finally:
        tool_fixtures.gate.set()


@pytest.mark.parametrize("name", ["hangs", "broken"])
async def test_a_tool_that_times_out_or_raises_gets_the_apology(
    engines: Engines, config: Config, whisper: Any, name: str
) -> None:
    d = dataclasses.replace(config.dialogue, tools=(f"tool_fixtures:{name}",), tool_choice="required")
    async with (
        running_server(engines, dataclasses.replace(config, dialogue=d)) as srv,
        voice_client(ws_url(srv)) as client,
    ):
        await client.start(output_sample_rate=OUT_RATE)
        client.start_microphone()
        client.say(espeak(QUESTION))
        latency = await client.wait_for(lambda m: m["type"] == "turn.latency", 240)
    turn = latency["turn_id"]
    (failed,) = [m for m in client.of("turn.failed") if m["turn_id"] == turn]
    assert failed["stage"] == "tool" and failed["message"].startswith(f"tool call failed: {name}: ")
    (result,) = [m for m in client.of("tool.result") if m["turn_id"] == turn]
    assert result["error"] is not None
    pcm = np.concatenate([f.pcm for f in client.audio if f.header["turn_id"] == turn])
    heard = normalize(whisper.transcribe(resample(to_float32(pcm), OUT_RATE, 16000)).text)
    assert "sorry" in heard, heard  # dialogue.apology, not a made-up temperature
    assert latency["record"]["failed"] == "tool"
