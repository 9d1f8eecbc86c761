"""The Realtime protocol against its reference, the official openai SDK (its own pydantic models).

* Every server event this server produces validates as the SDK's model of its type,
  with no field the SDK does not know and no value coerced; every server event type
  is produced at least once by the scripted sessions.
* Every client event the SDK's types can express, sent as the SDK sends it, parses:
  to an event, or to an error that is never about the event's shape (unknown field,
  wrong type, ...) -- only about values this server cannot use.
* The SDK over a real socket: how it connects (URL, query, headers, first event), and
  that this server's own ``voice_pipeline.turn.latency`` event does not break its iterator.
"""

from __future__ import annotations

import asyncio
import json
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from openai import AsyncOpenAI
from openai._utils import maybe_transform
from openai.types.realtime import (
    ConversationItemCreateEvent,
    ConversationItemTruncateEvent,
    InputAudioBufferAppendEvent,
    RealtimeAudioConfig,
    RealtimeAudioConfigInput,
    RealtimeAudioConfigOutput,
    RealtimeConversationItemFunctionCallOutput,
    RealtimeConversationItemUserMessage,
    RealtimeResponseCreateParams,
    RealtimeSessionCreateRequest,
    ResponseCancelEvent,
    ResponseCreateEvent,
    SessionUpdateEvent,
)
from openai.types.realtime.realtime_audio_formats import AudioPCMU
from openai.types.realtime.realtime_audio_input_turn_detection import SemanticVad, ServerVad
from openai.types.realtime.realtime_client_event_param import RealtimeClientEventParam
from openai.types.realtime.realtime_conversation_item_user_message import Content
from openai.types.realtime.response_create_event_with_references_param import (
    ResponseCreateEventWithReferencesParam,
)
from pydantic import BaseModel
from realtime_sdk import CLIENT_EVENT_MODELS, sdk_client_events, validate_server_event
from realtime_support import scripted_events
from websockets.asyncio.server import ServerConnection, serve

from voice_pipeline.realtime import client_events as ce
from voice_pipeline.realtime.audio import AudioFormat
from voice_pipeline.realtime.errors import ErrorCode, ProtocolError
from voice_pipeline.realtime.event_json import ServerEventEncoder, encode
from voice_pipeline.realtime.ids import Ids
from voice_pipeline.realtime.items import FunctionCallOutput, InputText, ItemReference, Message, Role
from voice_pipeline.realtime.server_events import ServerEvent, TurnLatencyMeasured
from voice_pipeline.realtime.session_config import Eagerness, Modality
from voice_pipeline.realtime.session_update import UNSET, ServerVadUpdate, SessionUpdate
from voice_pipeline.realtime.session_update import SemanticVad as OurSemanticVad
from voice_pipeline.realtime.tools import ToolChoiceMode

SCRIPTED = scripted_events()
STANDARD = [e for e in SCRIPTED if not isinstance(e, TurnLatencyMeasured)]


@pytest.mark.parametrize("n", range(len(STANDARD)), ids=lambda n: f"{n}-{STANDARD[n].TYPE}")
def test_server_event_validates_with_the_sdk(n: int) -> None:
    validate_server_event(encode(STANDARD[n], f"event_{n}"))


def test_every_server_event_type_is_produced() -> None:
    all_types = {cls.TYPE for cls in typing.get_args(ServerEvent)}
    assert {e.TYPE for e in SCRIPTED} == all_types


def test_event_ids_are_fresh_and_ids_consistent() -> None:
    encoder = ServerEventEncoder(Ids("x"))
    sent = [encoder.encode(e) for e in SCRIPTED]
    assert len({m["event_id"] for m in sent}) == len(sent)
    by_response: dict[str, set[str]] = {}
    for m in sent:
        if "response_id" in m and "item_id" in m and m["type"].startswith("response."):
            by_response.setdefault(m["response_id"], set()).add(m["item_id"])
        if m["type"] == "response.done":
            output_ids = {i["id"] for i in m["response"]["output"]}
            assert by_response.get(m["response"]["id"], set()) <= output_ids


def test_custom_latency_event_is_plain_json_outside_the_sdk_union() -> None:
    msg = encode(TurnLatencyMeasured({"turn_id": 3, "marks": {"speech_end": 10.5}}, "resp_1", "item_1"), "e1")
    assert json.loads(json.dumps(msg)) == msg
    assert msg["type"] == "voice_pipeline.turn.latency" and msg["record"]["turn_id"] == 3
    with pytest.raises(ValueError):  # not a standard event: strict validation refuses it
        validate_server_event(msg)


# ---------------------------------------------------------------- client events the SDK builds


def sdk_model_json(event: BaseModel) -> str:
    """What the SDK's ``send()`` writes for a model event."""
    return event.to_json(use_api_names=True, exclude_unset=True)  # type: ignore[attr-defined, no-any-return]


def sdk_param_json(event: dict[str, Any]) -> str:
    """What the SDK's ``send()`` writes for a TypedDict event."""
    return json.dumps(
        maybe_transform(event, typing.Union[RealtimeClientEventParam, ResponseCreateEventWithReferencesParam])  # noqa: UP007 (as the SDK)
    )


SDK_BUILT: list[tuple[str, str, ce.ClientEvent]] = [
    (
        "session.update",
        sdk_model_json(
            SessionUpdateEvent(
                type="session.update",
                event_id="evt_1",
                session=RealtimeSessionCreateRequest(
                    type="realtime",
                    model="gpt-realtime",
                    instructions="Be brief.",
                    output_modalities=["audio"],
                    max_output_tokens="inf",
                    tool_choice="auto",
                    tools=[],
                    audio=RealtimeAudioConfig(
                        input=RealtimeAudioConfigInput(
                            format=AudioPCMU(type="audio/pcmu"),
                            turn_detection=ServerVad(
                                type="server_vad", threshold=0.6, silence_duration_ms=400
                            ),
                        ),
                        output=RealtimeAudioConfigOutput(voice="marin", speed=1.0),
                    ),
                ),
            )
        ),
        ce.UpdateSession(
            SessionUpdate(
                model="gpt-realtime",
                instructions="Be brief.",
                output_modality=Modality.AUDIO,
                input_format=AudioFormat.PCMU,
                turn_detection=ServerVadUpdate(threshold=0.6, silence_duration_ms=400),
                voice="marin",
                speed=1.0,
                max_output_tokens=None,
                tools=(),
                tool_choice=ToolChoiceMode.AUTO,
            ),
            "evt_1",
        ),
    ),
    (
        "semantic_vad",
        sdk_model_json(
            SessionUpdateEvent(
                type="session.update",
                session=RealtimeSessionCreateRequest(
                    type="realtime",
                    audio=RealtimeAudioConfig(
                        input=RealtimeAudioConfigInput(
                            turn_detection=SemanticVad(
                                type="semantic_vad", eagerness="high", create_response=False
                            )
                        )
                    ),
                ),
            )
        ),
        ce.UpdateSession(SessionUpdate(turn_detection=OurSemanticVad(Eagerness.HIGH, create_response=False))),
    ),
    (
        "append",
        sdk_model_json(InputAudioBufferAppendEvent(type="input_audio_buffer.append", audio="AAEC")),
        ce.AppendInputAudio(b"\x00\x01\x02"),
    ),
    (
        "item.create user text",
        sdk_model_json(
            ConversationItemCreateEvent(
                type="conversation.item.create",
                previous_item_id="root",
                item=RealtimeConversationItemUserMessage(
                    type="message", role="user", id="item_a", content=[Content(type="input_text", text="Hi")]
                ),
            )
        ),
        ce.CreateItem(Message("item_a", Role.USER, (InputText("Hi"),)), "root"),
    ),
    (
        "item.create function output",
        sdk_model_json(
            ConversationItemCreateEvent(
                type="conversation.item.create",
                item=RealtimeConversationItemFunctionCallOutput(
                    type="function_call_output", call_id="call_1", output="42"
                ),
            )
        ),
        ce.CreateItem(FunctionCallOutput("", "call_1", "42")),
    ),
    (
        "truncate",
        sdk_model_json(
            ConversationItemTruncateEvent(
                type="conversation.item.truncate", item_id="item_b", content_index=0, audio_end_ms=1500
            )
        ),
        ce.TruncateItem("item_b", 0, 1500),
    ),
    (
        "response.create out of band",
        sdk_model_json(
            ResponseCreateEvent(
                type="response.create",
                response=RealtimeResponseCreateParams(
                    conversation="none",
                    instructions="Summarize.",
                    output_modalities=["text"],
                    max_output_tokens=64,
                    metadata={"purpose": "summary"},
                ),
            )
        ),
        ce.CreateResponse(
            ce.ResponseParams(
                conversation=ce.ConversationMode.NONE,
                instructions="Summarize.",
                output_modality=Modality.TEXT,
                max_output_tokens=64,
                metadata=(("purpose", "summary"),),
            )
        ),
    ),
    (
        "response.cancel",
        sdk_model_json(ResponseCancelEvent(type="response.cancel", response_id="resp_1")),
        ce.CancelResponse("resp_1"),
    ),
    (
        "response.create with references (TypedDict)",
        sdk_param_json(
            {
                "type": "response.create",
                "response": {"conversation": "none", "input": [{"type": "item_reference", "id": "item_a"}]},
            }
        ),
        ce.CreateResponse(
            ce.ResponseParams(conversation=ce.ConversationMode.NONE, input=(ItemReference("item_a"),))
        ),
    ),
    (
        "commit (TypedDict)",
        sdk_param_json({"type": "input_audio_buffer.commit", "event_id": "c1"}),
        ce.CommitInputAudio("c1"),
    ),
    (
        "output_audio_buffer.clear (TypedDict)",
        sdk_param_json({"type": "output_audio_buffer.clear"}),
        ce.ClearOutputAudio(),
    ),
]


@pytest.mark.parametrize(("name", "text", "expected"), SDK_BUILT, ids=[c[0] for c in SDK_BUILT])
def test_sdk_built_client_event_parses(name: str, text: str, expected: ce.ClientEvent) -> None:
    assert ce.parse_client_event(text) == expected


def test_the_parser_knows_exactly_the_sdk_client_event_types() -> None:
    sdk_types = {typing.get_args(cls.model_fields["type"].annotation)[0] for cls in CLIENT_EVENT_MODELS}
    assert set(ce.KNOWN_TYPES) == sdk_types
    trivial = {"conversation.item.retrieve", "conversation.item.delete", "input_audio_buffer.clear"}
    assert {json.loads(text)["type"] for _, text, _ in SDK_BUILT} == sdk_types - trivial


_NOT_ABOUT_SHAPE_WHEN_SDK_VALID = frozenset(
    {
        ErrorCode.INVALID_JSON,
        ErrorCode.INVALID_EVENT,
        ErrorCode.UNKNOWN_EVENT_TYPE,
        ErrorCode.UNKNOWN_PARAMETER,
        ErrorCode.INVALID_TYPE,
    }
)


def _at(data: Any, param: str) -> Any:
    """The value at a dotted/indexed param path (None if absent)."""
    for part in param.replace("[", ".").replace("]", "").split("."):
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


@settings(
    max_examples=3000, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
@given(sdk_client_events())
def test_any_client_event_the_sdk_can_express_parses_or_gets_a_value_error(text: str) -> None:
    result = ce.parse_client_event(text)
    if not isinstance(result, ProtocolError):
        return
    assert result.code not in _NOT_ABOUT_SHAPE_WHEN_SDK_VALID, (result, text)
    if result.code is ErrorCode.MISSING_PARAMETER:
        # the SDK's types make some fields optional that a message needs (text of input_text)
        assert result.param is not None and _at(json.loads(text), result.param) is None, (result, text)


# ---------------------------------------------------------------- the SDK over a real socket


async def test_sdk_connects_like_this_and_skips_over_the_custom_event() -> None:
    seen: dict[str, Any] = {}
    encoder = ServerEventEncoder(Ids("s"))
    created = next(e for e in SCRIPTED if e.TYPE == "session.created")
    latency = next(e for e in SCRIPTED if isinstance(e, TurnLatencyMeasured))
    done = next(e for e in SCRIPTED if e.TYPE == "response.done")

    async def handler(ws: ServerConnection) -> None:
        assert ws.request is not None
        seen["path"] = ws.request.path
        seen["headers"] = {k.lower(): v for k, v in ws.request.headers.raw_items()}
        seen["first"] = json.loads(await ws.recv())
        for event in (created, latency, done):
            await ws.send(encoder.text(event))
        await ws.close()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        client = AsyncOpenAI(api_key="the-server-token", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
        received = []
        async with client.realtime.connect(model="voice-pipeline") as conn:
            await conn.session.update(session={"type": "realtime", "instructions": "Be brief."})
            async with asyncio.timeout(10):
                async for event in conn:
                    received.append(event)

    assert seen["path"] == "/v1/realtime?model=voice-pipeline"
    assert seen["headers"]["authorization"] == "Bearer the-server-token"
    assert "openai-beta" not in seen["headers"] and "origin" not in seen["headers"]
    assert seen["first"] == {
        "type": "session.update",
        "session": {"type": "realtime", "instructions": "Be brief."},
    }
    assert [e.type for e in received] == ["session.created", "voice_pipeline.turn.latency", "response.done"]
    assert getattr(received[1], "record") == {"turn_id": 1, "stages_ms": {"asr_final": 80.0}}  # noqa: B009
    assert ce.parse_client_event(json.dumps(seen["first"])) == ce.UpdateSession(
        SessionUpdate(instructions="Be brief.")
    )
    assert UNSET is SessionUpdate().model
