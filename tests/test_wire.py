"""The /ws messages typed both ways (pure): the exact JSON of each, and parse(serialize(m)) == m."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records import full_record

from clients.talkview import TurnView
from voice_pipeline import events as ev
from voice_pipeline.bench.caller_ws import wire_event
from voice_pipeline.config import BudgetConfig
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.server.protocol import ready, server_message
from voice_pipeline.wire import client_messages as cm
from voice_pipeline.wire import server_messages as sm

# ---------------------------------------------------------------- client -> server

CLIENT: list[tuple[cm.ClientMessage, str]] = [
    (
        cm.Start(16000, 24000),
        '{"type":"start","version":1,"sample_rate":16000,"format":"pcm16","output_sample_rate":24000,'
        '"capabilities":{"playback_reports":false,"echo_cancellation":false}}',
    ),
    (
        cm.Start(48000, 8000, cm.Capabilities(playback_reports=True, echo_cancellation=True)),
        '{"type":"start","version":1,"sample_rate":48000,"format":"pcm16","output_sample_rate":8000,'
        '"capabilities":{"playback_reports":true,"echo_cancellation":true}}',
    ),
    (cm.Playback(0), '{"type":"playback","played":0}'),
    (cm.Playback(4800, cleared=3), '{"type":"playback","played":4800,"cleared":3}'),
    (cm.Interrupt(), '{"type":"interrupt"}'),
    (cm.PttStart(), '{"type":"ptt.start"}'),
    (cm.PttEnd(), '{"type":"ptt.end"}'),
    (cm.Stop(), '{"type":"stop"}'),
]


@pytest.mark.parametrize(("message", "text"), CLIENT, ids=[t for _, t in CLIENT])
def test_client_message_json_and_round_trip(message: cm.ClientMessage, text: str) -> None:
    assert message.serialize() == text
    assert cm.parse_client_message(message.serialize()) == message


def test_every_client_message_type_is_in_the_table() -> None:
    assert {m.TYPE for m, _ in CLIENT} == set(cm.KNOWN_TYPES)


def test_the_microphone_frame_is_pcm16_little_endian() -> None:
    frame = cm.pcm16_frame(np.array([0.0, 0.5, -1.0, 2.0], dtype=np.float32))
    assert np.frombuffer(frame, dtype="<i2").tolist() == [0, 16384, -32768, 32767]


# ---------------------------------------------------------------- server -> client


def on_the_grid(record: TurnRecord) -> TurnRecord:
    """``record`` as it comes off the wire: figures rounded as the ledger writes them."""
    return TurnRecord.from_dict(record.as_dict())


BUDGETS = {"endpointing": 400.0, "voice_to_voice": 800.0}
GRID = on_the_grid(full_record(3))
LATENCY_JSON = (
    '{"type":"turn.latency","turn_id":3,"record":'
    + json.dumps(full_record(3).as_dict(), separators=(",", ":"), ensure_ascii=False)
    + "}"
)
#: (the session event it stands for, or None; the message; its exact JSON as the server sends it)
SERVER: list[tuple[ev.Event | None, sm.KnownMessage, str]] = [
    (
        None,
        sm.Ready(1, "abc", 16000, 24000, 4096, BUDGETS),
        '{"type":"ready","version":1,"session_id":"abc","input_sample_rate":16000,'
        '"output_sample_rate":24000,"max_frame_bytes":4096,'
        '"budgets":{"endpointing":400.0,"voice_to_voice":800.0}}',
    ),
    (ev.SpeechStarted(1, 0), sm.SpeechStarted(1), '{"type":"speech.started","turn_id":1}'),
    (ev.TurnContinued(1, 0), sm.TurnContinued(1), '{"type":"turn.continued","turn_id":1}'),
    (
        ev.TranscriptPartial(1, 0, "what is", "the"),
        sm.TranscriptPartial(1, "what is", "the"),
        '{"type":"transcript.partial","turn_id":1,"committed":"what is","tentative":"the"}',
    ),
    (
        ev.TranscriptFinalized(1, 0, "Où est la gare?"),
        sm.TranscriptFinal(1, "Où est la gare?"),
        '{"type":"transcript.final","turn_id":1,"text":"Où est la gare?"}',
    ),
    (
        ev.AssistantTextStreamed(1, 0, ' "Par'),
        sm.AssistantText(1, ' "Par'),
        '{"type":"assistant.text","turn_id":1,"delta":" \\"Par"}',
    ),
    (None, sm.AssistantAudio(1, 4800), '{"type":"assistant.audio","turn_id":1,"samples":4800}'),
    (None, sm.AudioClear(1), '{"type":"audio.clear","turn_id":1}'),
    (
        ev.ReplyResumed(1, 0, "backchannel"),
        sm.ReplyResumed(1, "backchannel"),
        '{"type":"reply.resumed","turn_id":1,"reason":"backchannel"}',
    ),
    (
        ev.ReplyInterrupted(1, 0, "words"),
        sm.ReplyInterrupted(1, "words"),
        '{"type":"reply.interrupted","turn_id":1,"reason":"words"}',
    ),
    (ev.TurnCompleted(3, 0, GRID), sm.TurnLatency(3, GRID), LATENCY_JSON),
    (
        ev.BudgetExceeded(1, 0, "asr_final", 170.04, 150.0),
        sm.BudgetExceeded(1, "asr_final", 170.0, 150.0),
        '{"type":"budget.exceeded","turn_id":1,"stage":"asr_final","duration_ms":170.0,"budget_ms":150.0}',
    ),
    (
        ev.TurnFailed(1, 0, "llm", "LLM down", True),
        sm.TurnFailed(1, "llm", "LLM down", True),
        '{"type":"turn.failed","turn_id":1,"stage":"llm","message":"LLM down","retryable":true}',
    ),
    (
        ev.ToolCallDone(1, 0, 0, "call_1", "get_weather", '{"city": "Paris"}'),
        sm.ToolCalled(1, "call_1", "get_weather", '{"city": "Paris"}'),
        '{"type":"tool.call","turn_id":1,"call_id":"call_1","name":"get_weather",'
        '"arguments":"{\\"city\\": \\"Paris\\"}"}',
    ),
    (
        ev.ToolResult(1, 0, "call_1", "get_weather", "17 degrees"),
        sm.ToolReturned(1, "call_1", "get_weather", "17 degrees", None),
        '{"type":"tool.result","turn_id":1,"call_id":"call_1","name":"get_weather","output":"17 degrees",'
        '"error":null}',
    ),
    (
        None,
        sm.ErrorReported("bad_field", "'played' must be >= 0"),
        '{"type":"error","code":"bad_field","message":"\'played\' must be >= 0"}',
    ),
]


@pytest.mark.parametrize(("event", "message", "text"), SERVER, ids=[m.TYPE for _, m, _ in SERVER])
def test_server_message_json_and_round_trip(
    event: ev.Event | None, message: sm.KnownMessage, text: str
) -> None:
    assert message.serialize() == text
    assert sm.parse_server_message(text) == message
    if event is not None:  # what the server sends for the session event
        assert server_message(event, origin_ns=0) == message
        assert server_message(event, origin_ns=0).serialize() == text  # type: ignore[union-attr]


def test_every_server_message_type_is_in_the_table() -> None:
    assert [m.TYPE for _, m, _ in SERVER] == [cls.TYPE for cls in sm.KNOWN]


def test_the_server_builds_ready_from_its_start_and_budgets() -> None:
    msg = ready("abc", cm.Start(8000, 22050), 640, BudgetConfig())
    assert (msg.version, msg.input_rate_hz, msg.output_rate_hz, msg.max_frame_bytes) == (1, 8000, 22050, 640)
    assert msg.budgets_ms["voice_to_voice"] == BudgetConfig().voice_to_voice_ms
    assert msg.budgets_ms["tool"] == BudgetConfig().tool_ms  # a turn with a tool has its stages
    assert sm.parse_server_message(msg.serialize()) == msg


def test_turn_latency_counts_the_marks_from_the_session_start() -> None:
    origin = 7_000_000_000
    raw = full_record(3, origin_ns=origin)
    msg = server_message(ev.TurnCompleted(3, 0, raw), origin_ns=origin)
    assert isinstance(msg, sm.TurnLatency)
    assert msg.serialize() == LATENCY_JSON  # the same JSON as that of the record made at 0
    assert json.loads(msg.serialize())["record"] == raw.as_dict(origin)


# ---------------------------------------------------------------- what a client cannot know


def test_an_unknown_type_is_kept_whole_and_ignored_by_every_client() -> None:
    text = '{"type":"speech.paused","turn_id":4,"why":["cough"]}'
    msg = sm.parse_server_message(text)
    assert msg == sm.Unknown("speech.paused", {"type": "speech.paused", "turn_id": 4, "why": ["cough"]})
    assert msg.serialize() == text
    assert TurnView({}, colour=False).event(msg) == []
    assert wire_event(msg, 1.0) is None


def test_a_known_message_with_more_fields_keeps_what_it_knows() -> None:
    msg = sm.parse_server_message('{"type":"audio.clear","turn_id":2,"reason":"new in v1.1"}')
    assert msg == sm.AudioClear(2)


BAD_RECORD = GRID.as_dict()
del BAD_RECORD["heard_text"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json", "not JSON"),
        ("[" * 5000, "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ("{}", "string 'type'"),
        ('{"type": 7, "turn_id": 1}', "string 'type'"),
        ('{"type": "speech.started"}', "without 'turn_id'"),
        ('{"type": "speech.started", "turn_id": "1"}', "'turn_id' must be an integer"),
        ('{"type": "speech.started", "turn_id": true}', "'turn_id' must be an integer"),
        ('{"type": "assistant.text", "turn_id": 1, "delta": null}', "'delta' must be a string"),
        ('{"type": "turn.failed", "turn_id": 1, "stage": "llm", "message": "x", "retryable": 1}', "true or"),
        (
            '{"type": "budget.exceeded", "turn_id": 1, "stage": "x", "duration_ms": NaN, "budget_ms": 1}',
            "'duration_ms' must be a finite number",
        ),
        ('{"type": "ready", "version": 1}', "without 'session_id'"),
        (json.dumps({"type": "turn.latency", "turn_id": 1, "record": BAD_RECORD}), "KeyError: 'heard_text'"),
        (
            json.dumps(
                {"type": "turn.latency", "turn_id": 1, "record": {**GRID.as_dict(), "marks": {"x": "1"}}}
            ),
            "'record' must be a ledger record",
        ),
        ('{"type": "turn.latency", "turn_id": 1, "record": [1]}', "'record' must be a ledger record"),
    ],
)
def test_a_broken_server_message_is_a_server_message_error(text: str, says: str) -> None:
    with pytest.raises(sm.ServerMessageError) as info:
        sm.parse_server_message(text)
    assert says in str(info.value)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
FIELDS = [f.metadata.get("key", f.name) for cls in sm.KNOWN for f in dataclasses.fields(cls)]
OBJECTS = st.fixed_dictionaries(
    {"type": st.sampled_from([cls.TYPE for cls in sm.KNOWN]) | JSON},
    optional={name: JSON for name in FIELDS} | {"record": st.just(GRID.as_dict()) | JSON},
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.text(max_size=80) | JSON.map(json.dumps) | OBJECTS.map(json.dumps))
def test_any_text_from_a_server_is_a_message_or_a_server_message_error(text: str) -> None:
    try:
        msg = sm.parse_server_message(text)
    except sm.ServerMessageError as exc:
        assert str(exc)
        return
    if not isinstance(msg, sm.Unknown):
        assert sm.parse_server_message(msg.serialize()) == msg


# ---------------------------------------------------------------- a client's stream


def test_the_stream_pairs_each_binary_frame_with_its_header() -> None:
    stream = sm.ServerStream()
    assert stream.binary(b"\x01\x00") is None  # no header: not reply audio
    assert stream.text('{"type":"assistant.audio","turn_id":5,"samples":2}') == sm.AssistantAudio(5, 2)
    assert stream.text('{"type":"assistant.text","turn_id":5,"delta":"x"}') == sm.AssistantText(5, "x")
    frame = stream.binary(np.array([1, -2], dtype="<i2").tobytes())
    assert frame is not None and frame.turn_id == 5 and frame.header == sm.AssistantAudio(5, 2)
    assert frame.pcm.dtype == np.int16 and frame.pcm.tolist() == [1, -2]
    assert stream.binary(b"\x00\x00") is None  # one frame per header
