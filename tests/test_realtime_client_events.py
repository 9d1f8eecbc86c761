"""The Realtime client event parser: every good event typed, every bad one an error in the
protocol's shape (code, param, the client's event_id), never an exception (table-driven)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from voice_pipeline.realtime import client_events as ce
from voice_pipeline.realtime.audio import AudioFormat
from voice_pipeline.realtime.errors import ErrorCode, ProtocolError
from voice_pipeline.realtime.items import (
    FunctionCall,
    FunctionCallOutput,
    InputAudio,
    InputText,
    ItemReference,
    Message,
    OutputText,
    Role,
)
from voice_pipeline.realtime.session_config import Eagerness, Modality
from voice_pipeline.realtime.session_update import UNSET, SemanticVad, ServerVadUpdate, SessionUpdate
from voice_pipeline.realtime.tools import FunctionTool, ToolChoiceFunction, ToolChoiceMode


def parse(event: dict[str, Any] | str) -> ce.ClientEvent | ProtocolError:
    return ce.parse_client_event(event if isinstance(event, str) else json.dumps(event))


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": list(parts)}


GOOD: list[tuple[str, dict[str, Any], ce.ClientEvent]] = [
    (
        "append",
        {
            "type": "input_audio_buffer.append",
            "audio": base64.b64encode(b"\x01\x02\x03").decode(),
            "event_id": "a",
        },
        ce.AppendInputAudio(b"\x01\x02\x03", "a"),
    ),
    ("append empty", {"type": "input_audio_buffer.append", "audio": ""}, ce.AppendInputAudio(b"")),
    ("commit", {"type": "input_audio_buffer.commit"}, ce.CommitInputAudio()),
    ("clear", {"type": "input_audio_buffer.clear", "event_id": "c"}, ce.ClearInputAudio("c")),
    ("clear output", {"type": "output_audio_buffer.clear"}, ce.ClearOutputAudio()),
    ("cancel", {"type": "response.cancel"}, ce.CancelResponse()),
    ("cancel by id", {"type": "response.cancel", "response_id": "resp_9"}, ce.CancelResponse("resp_9")),
    ("retrieve", {"type": "conversation.item.retrieve", "item_id": "i1"}, ce.RetrieveItem("i1")),
    ("delete", {"type": "conversation.item.delete", "item_id": "i1"}, ce.DeleteItem("i1")),
    (
        "truncate",
        {"type": "conversation.item.truncate", "item_id": "i1", "content_index": 0, "audio_end_ms": 850},
        ce.TruncateItem("i1", 0, 850),
    ),
    (
        "user text",
        {"type": "conversation.item.create", "item": user({"type": "input_text", "text": "Hello"})},
        ce.CreateItem(Message("", Role.USER, (InputText("Hello"),))),
    ),
    (
        "user audio with transcript, after an item",
        {
            "type": "conversation.item.create",
            "previous_item_id": "item_1",
            "item": {**user({"type": "input_audio", "audio": "AAA=", "transcript": "hi"}), "id": "mine"},
        },
        ce.CreateItem(Message("mine", Role.USER, (InputAudio("hi", b"\x00\x00"),)), "item_1"),
    ),
    (
        "content type inferred (the SDK allows leaving it out)",
        {"type": "conversation.item.create", "item": user({"text": "Hi"})},
        ce.CreateItem(Message("", Role.USER, (InputText("Hi"),))),
    ),
    (
        "assistant text at the root, empty and echoed fields accepted",
        {
            "type": "conversation.item.create",
            "previous_item_id": "root",
            "item": {
                "type": "message",
                "role": "assistant",
                "object": "realtime.item",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Sure."}],
            },
        },
        ce.CreateItem(Message("", Role.ASSISTANT, (OutputText("Sure."),)), "root"),
    ),
    (
        "system message, no content",
        {"type": "conversation.item.create", "item": {"type": "message", "role": "system", "content": []}},
        ce.CreateItem(Message("", Role.SYSTEM, ())),
    ),
    (
        "function call and output",
        {
            "type": "conversation.item.create",
            "item": {"type": "function_call", "name": "clock", "arguments": "{}", "call_id": "c1"},
        },
        ce.CreateItem(FunctionCall("", "c1", "clock", "{}")),
    ),
    (
        "function output",
        {
            "type": "conversation.item.create",
            "item": {"type": "function_call_output", "call_id": "c1", "output": "noon"},
        },
        ce.CreateItem(FunctionCallOutput("", "c1", "noon")),
    ),
    ("response.create bare", {"type": "response.create"}, ce.CreateResponse()),
    (
        "response.create everything",
        {
            "type": "response.create",
            "event_id": "r1",
            "response": {
                "conversation": "none",
                "instructions": "Say bye.",
                "output_modalities": ["text"],
                "max_output_tokens": "inf",
                "metadata": {"topic": "bye"},
                "input": [
                    {"type": "item_reference", "id": "item_3"},
                    user({"type": "input_text", "text": "x"}),
                ],
                "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "joe"}},
                "tools": [],
                "tool_choice": "none",
                "parallel_tool_calls": False,
                "prompt": None,
                "reasoning": None,
            },
        },
        ce.CreateResponse(
            ce.ResponseParams(
                conversation=ce.ConversationMode.NONE,
                input=(ItemReference("item_3"), Message("", Role.USER, (InputText("x"),))),
                instructions="Say bye.",
                output_modality=Modality.TEXT,
                max_output_tokens=None,
                metadata=(("topic", "bye"),),
                tools=(),
                tool_choice=ToolChoiceMode.NONE,
                output_format=AudioFormat.PCM,
                voice="joe",
            ),
            "r1",
        ),
    ),
    (
        "session.update minimal",
        {"type": "session.update", "session": {"type": "realtime"}},
        ce.UpdateSession(SessionUpdate()),
    ),
    (
        "session.update the way LiveKit sends it",
        {
            "type": "session.update",
            "event_id": "session_update_x",
            "session": {
                "type": "realtime",
                "model": "gpt-realtime",
                "output_modalities": ["audio"],
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "noise_reduction": None,
                        "transcription": {"model": "gpt-4o-mini-transcribe"},
                        "turn_detection": {
                            "type": "server_vad",
                            "threshold": 0.5,
                            "prefix_padding_ms": 300,
                            "silence_duration_ms": 200,
                            "create_response": True,
                            "interrupt_response": True,
                        },
                    },
                    "output": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "speed": None,
                        "voice": "marin",
                    },
                },
                "max_output_tokens": "inf",
                "tool_choice": "auto",
                "tracing": None,
            },
        },
        ce.UpdateSession(
            SessionUpdate(
                model="gpt-realtime",
                output_modality=Modality.AUDIO,
                input_format=AudioFormat.PCM,
                output_format=AudioFormat.PCM,
                turn_detection=ServerVadUpdate(0.5, 300, 200, True, True),
                transcription=True,
                voice="marin",
                max_output_tokens=None,
                tool_choice=ToolChoiceMode.AUTO,
            ),
            "session_update_x",
        ),
    ),
    (
        "session.update echoing session.created's read-only fields, semantic vad, tools",
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "object": "realtime.session",
                "id": "sess_1",
                "expires_at": 0,
                "instructions": "",
                "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}}},
                "tools": [
                    {
                        "type": "function",
                        "name": "clock",
                        "description": "time",
                        "parameters": {"type": "object"},
                    }
                ],
                "tool_choice": {"type": "function", "name": "clock"},
                "truncation": "auto",
                "tracing": "auto",
                "include": [],
            },
        },
        ce.UpdateSession(
            SessionUpdate(
                instructions="",
                turn_detection=SemanticVad(Eagerness.LOW),
                tools=(FunctionTool("clock", "time", '{"type":"object"}'),),
                tool_choice=ToolChoiceFunction("clock"),
            )
        ),
    ),
    (
        "turn detection off, transcription off",
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "audio": {"input": {"turn_detection": None, "transcription": None}},
            },
        },
        ce.UpdateSession(SessionUpdate(turn_detection=None, transcription=False)),
    ),
]


@pytest.mark.parametrize(("name", "event", "expected"), GOOD, ids=[g[0] for g in GOOD])
def test_good_events(name: str, event: dict[str, Any], expected: ce.ClientEvent) -> None:
    assert parse(event) == expected


BAD: list[tuple[str, dict[str, Any] | str | bytes, ErrorCode, str | None]] = [
    ("not JSON", "{", ErrorCode.INVALID_JSON, None),
    ("not UTF-8", b"\xff\xfe", ErrorCode.INVALID_JSON, None),
    (
        "NaN",
        '{"type":"conversation.item.truncate","item_id":"i","content_index":NaN}',
        ErrorCode.INVALID_JSON,
        None,
    ),
    ("huge exponent", '{"type":"response.cancel","x":1e999}', ErrorCode.INVALID_JSON, None),
    ("5000 digits", '{"type":"response.cancel","x":' + "9" * 5000 + "}", ErrorCode.INVALID_JSON, None),
    ("deep beyond json", "[" * 5000, ErrorCode.INVALID_JSON, None),
    (
        "deep within json",
        '{"type":"response.cancel","x":' + "[" * 100 + "]" * 100 + "}",
        ErrorCode.INVALID_EVENT,
        None,
    ),
    ("an array", "[1]", ErrorCode.INVALID_EVENT, None),
    ("no type", {"event_id": "e"}, ErrorCode.MISSING_PARAMETER, "type"),
    ("unknown type", {"type": "response.text.delta"}, ErrorCode.UNKNOWN_EVENT_TYPE, "type"),
    ("type not a string", {"type": 5}, ErrorCode.UNKNOWN_EVENT_TYPE, "type"),
    ("unknown field", {"type": "input_audio_buffer.commit", "foo": 1}, ErrorCode.UNKNOWN_PARAMETER, "foo"),
    ("bad base64", {"type": "input_audio_buffer.append", "audio": "%%%"}, ErrorCode.INVALID_BASE64, "audio"),
    (
        "audio not a string",
        {"type": "input_audio_buffer.append", "audio": 5},
        ErrorCode.INVALID_TYPE,
        "audio",
    ),
    ("no audio", {"type": "input_audio_buffer.append"}, ErrorCode.MISSING_PARAMETER, "audio"),
    (
        "event_id a number",
        {"type": "input_audio_buffer.commit", "event_id": 3},
        ErrorCode.INVALID_TYPE,
        "event_id",
    ),
    (
        "truncate negative",
        {"type": "conversation.item.truncate", "item_id": "i", "content_index": 0, "audio_end_ms": -1},
        ErrorCode.INVALID_VALUE,
        "audio_end_ms",
    ),
    (
        "truncate bool",
        {"type": "conversation.item.truncate", "item_id": "i", "content_index": True, "audio_end_ms": 1},
        ErrorCode.INVALID_TYPE,
        "content_index",
    ),
    (
        "truncate missing",
        {"type": "conversation.item.truncate", "item_id": "i"},
        ErrorCode.MISSING_PARAMETER,
        "content_index",
    ),
    ("item missing", {"type": "conversation.item.create"}, ErrorCode.MISSING_PARAMETER, "item"),
    ("item not an object", {"type": "conversation.item.create", "item": []}, ErrorCode.INVALID_TYPE, "item"),
    (
        "unknown item type",
        {"type": "conversation.item.create", "item": {"type": "note"}},
        ErrorCode.INVALID_VALUE,
        "item.type",
    ),
    (
        "MCP item",
        {"type": "conversation.item.create", "item": {"type": "mcp_call", "id": "x", "server_label": "s"}},
        ErrorCode.UNSUPPORTED,
        "item.type",
    ),
    (
        "unknown role",
        {"type": "conversation.item.create", "item": {"type": "message", "role": "developer", "content": []}},
        ErrorCode.INVALID_VALUE,
        "item.role",
    ),
    (
        "image",
        {"type": "conversation.item.create", "item": user({"type": "input_image", "image_url": "data:,"})},
        ErrorCode.UNSUPPORTED,
        "item.content[0]",
    ),
    (
        "assistant audio",
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_audio", "audio": "AA=="}],
            },
        },
        ErrorCode.UNSUPPORTED,
        "item.content[0]",
    ),
    (
        "output text in a user message",
        {"type": "conversation.item.create", "item": user({"type": "output_text", "text": "x"})},
        ErrorCode.INVALID_VALUE,
        "item.content[0].type",
    ),
    (
        "audio part with neither audio nor transcript",
        {"type": "conversation.item.create", "item": user({"type": "input_audio"})},
        ErrorCode.INVALID_VALUE,
        "item.content[0]",
    ),
    (
        "text with a lone surrogate",
        '{"type":"conversation.item.create","item":{"type":"message","role":"user",'
        '"content":[{"type":"input_text","text":"\\ud800"}]}}',
        ErrorCode.INVALID_VALUE,
        "item.content[0].text",
    ),
    (
        "field of another item type",
        {"type": "conversation.item.create", "item": {**user(), "output": "x"}},
        ErrorCode.UNKNOWN_PARAMETER,
        "item.output",
    ),
    (
        "another conversation",
        {"type": "response.create", "response": {"conversation": "conv_9"}},
        ErrorCode.UNSUPPORTED,
        "response.conversation",
    ),
    (
        "metadata value not a string",
        {"type": "response.create", "response": {"metadata": {"k": 1}}},
        ErrorCode.INVALID_TYPE,
        "response.metadata.k",
    ),
    (
        "too much metadata",
        {"type": "response.create", "response": {"metadata": {str(n): "v" for n in range(17)}}},
        ErrorCode.INVALID_VALUE,
        "response.metadata",
    ),
    (
        "reference with extra fields",
        {"type": "response.create", "response": {"input": [{"type": "item_reference", "id": "i", "x": 1}]}},
        ErrorCode.UNKNOWN_PARAMETER,
        "response.input[0].x",
    ),
]


@pytest.mark.parametrize(("name", "frame", "code", "param"), BAD, ids=[b[0] for b in BAD])
def test_bad_events(
    name: str, frame: dict[str, Any] | str | bytes, code: ErrorCode, param: str | None
) -> None:
    result = ce.parse_client_event(frame if isinstance(frame, str | bytes) else json.dumps(frame))
    assert isinstance(result, ProtocolError), result
    assert (result.code, result.param) == (code, param), result.message
    assert 0 < len(result.message) <= 600


def test_the_error_carries_the_client_event_id() -> None:
    result = parse({"type": "input_audio_buffer.append", "audio": "%", "event_id": "evt_42"})
    assert isinstance(result, ProtocolError) and result.event_id == "evt_42"


def test_an_unusable_event_id_is_not_echoed() -> None:
    result = parse({"type": "input_audio_buffer.commit", "event_id": "x" * 600})
    assert isinstance(result, ProtocolError) and result.param == "event_id" and result.event_id is None


def test_too_large() -> None:
    result = ce.parse_client_event(
        '{"type":"input_audio_buffer.append","audio":"' + "A" * 2000 + '"}', max_bytes=1000
    )
    assert isinstance(result, ProtocolError) and result.code is ErrorCode.EVENT_TOO_LARGE


def test_binary_frames_hold_utf8_json() -> None:
    assert ce.parse_client_event(b'{"type":"input_audio_buffer.commit"}') == ce.CommitInputAudio()


def test_long_errors_quote_a_bounded_excerpt() -> None:
    result = parse({"type": "x" * 100_000})
    assert isinstance(result, ProtocolError) and len(result.message) < 1000


def test_absent_fields_are_unset_not_none() -> None:
    event = parse({"type": "session.update", "session": {"type": "realtime", "instructions": "Hi"}})
    assert isinstance(event, ce.UpdateSession)
    assert event.session.instructions == "Hi" and event.session.turn_detection is UNSET
