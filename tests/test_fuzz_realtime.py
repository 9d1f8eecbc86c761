"""Hypothesis fuzzing of the Realtime client event parser and the state it drives (no I/O).

Properties, for any input whatsoever:

* a frame (text or binary) parses to a client event or to a ProtocolError -- never an
  exception -- and the error is sendable: a short message, an ``error`` event the openai
  SDK validates, plain UTF-8 JSON;
* events of every known type with arbitrary fields: the same, and what is accepted holds
  typed, bounded, sendable values (no lone surrogates, no NaN, ints in range);
* any sequence of events applied to a session's pure state (config, conversation, input
  buffer) either answers with server events the SDK validates or refuses with a
  RealtimeClientError, and leaves the conversation consistent (unique ids, bounded).

Reproducible: ``derandomize=True`` and no example database, no deadline (as the other
protocol fuzzers in tests/test_fuzz_protocols.py).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from realtime_sdk import validate_server_event
from realtime_support import PROFILE

from voice_pipeline.realtime import client_events as ce
from voice_pipeline.realtime.conversation import Conversation
from voice_pipeline.realtime.errors import ErrorCode, ProtocolError, RealtimeClientError
from voice_pipeline.realtime.event_json import encode
from voice_pipeline.realtime.ids import Ids
from voice_pipeline.realtime.input import InputSequencer
from voice_pipeline.realtime.items import FunctionCall, Message
from voice_pipeline.realtime.response import ResponseSequencer, resolve_response
from voice_pipeline.realtime.server_events import ErrorOccurred, ServerEvent
from voice_pipeline.realtime.session_config import initial_config
from voice_pipeline.realtime.session_update import apply_update

MANY = settings(
    max_examples=2000, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
SEQUENCES = settings(
    max_examples=600, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
MAX_ERROR_CHARS = 600

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        ["", "realtime", "root", "auto", "none", "audio", "text", "audio/pcmu", "\ud800", "AAAA"]
    ),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def maybe(key: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(st.just({}), values.map(lambda v: {key: v}))


def merged(*parts: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(*parts).map(lambda ds: {k: v for d in ds for k, v in d.items()})


b64 = st.one_of(
    st.binary(max_size=300).map(lambda b: base64.b64encode(b).decode()),
    st.text(max_size=30),
    json_values,
)
ids = st.one_of(st.sampled_from(["item_1", "item_2", "root", "x" * 70, ""]), json_values)
parts = st.fixed_dictionaries(
    {},
    optional={
        "type": st.one_of(
            st.sampled_from(["input_text", "input_audio", "output_text", "output_audio", "input_image"]),
            json_values,
        ),
        "text": st.one_of(st.text(max_size=20), json_values),
        "audio": b64,
        "transcript": st.one_of(st.text(max_size=20), json_values),
    },
)
items = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "type": st.one_of(
                st.sampled_from(["message", "function_call", "function_call_output", "mcp_call"]), json_values
            )
        },
        optional={
            "id": ids,
            "role": st.one_of(st.sampled_from(["user", "assistant", "system"]), json_values),
            "content": st.one_of(st.lists(parts, max_size=3), json_values),
            "name": json_values,
            "arguments": st.one_of(st.just("{}"), json_values),
            "call_id": ids,
            "output": json_values,
            "status": json_values,
        },
    ),
)
vad = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"type": st.one_of(st.sampled_from(["server_vad", "semantic_vad"]), json_values)},
        optional={
            k: json_values
            for k in (
                "threshold",
                "prefix_padding_ms",
                "silence_duration_ms",
                "create_response",
                "eagerness",
                "idle_timeout_ms",
            )
        },
    ),
)
formats = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["audio/pcm", "audio/pcmu", "audio/pcma", "pcm16"]),
            "rate": json_values,
        },
    ),
)
sessions = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"type": st.one_of(st.just("realtime"), json_values)},
        optional={
            "instructions": st.one_of(st.text(max_size=30), json_values),
            "output_modalities": st.one_of(
                st.sampled_from([["audio"], ["text"], ["text", "audio"]]), json_values
            ),
            "max_output_tokens": st.one_of(st.just("inf"), st.integers(-5, 5000), json_values),
            "tools": st.one_of(st.just([]), json_values),
            "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]), json_values),
            "model": json_values,
            "tracing": json_values,
            "audio": st.fixed_dictionaries(
                {},
                optional={
                    "input": st.fixed_dictionaries(
                        {}, optional={"format": formats, "turn_detection": vad, "transcription": json_values}
                    ),
                    "output": st.fixed_dictionaries(
                        {}, optional={"format": formats, "voice": json_values, "speed": json_values}
                    ),
                },
            ),
        },
    ),
)
responses = st.fixed_dictionaries(
    {},
    optional={
        "conversation": st.one_of(st.sampled_from(["auto", "none"]), json_values),
        "instructions": json_values,
        "output_modalities": json_values,
        "input": st.one_of(st.lists(items, max_size=2), json_values),
        "metadata": json_values,
        "max_output_tokens": json_values,
    },
)
typed_events = st.one_of(
    merged(st.just({"type": "session.update"}), maybe("session", sessions), maybe("event_id", json_values)),
    merged(st.just({"type": "input_audio_buffer.append"}), maybe("audio", b64)),
    merged(st.sampled_from([{"type": t} for t in ce.KNOWN_TYPES]), maybe("event_id", json_values)),
    merged(
        st.just({"type": "conversation.item.create"}), maybe("item", items), maybe("previous_item_id", ids)
    ),
    merged(
        st.sampled_from([{"type": "conversation.item.retrieve"}, {"type": "conversation.item.delete"}]),
        maybe("item_id", ids),
    ),
    merged(
        st.just({"type": "conversation.item.truncate"}),
        maybe("item_id", ids),
        maybe("content_index", st.one_of(st.integers(-2, 3), json_values)),
        maybe("audio_end_ms", st.one_of(st.integers(-10, 5000), json_values)),
    ),
    merged(st.just({"type": "response.create"}), maybe("response", st.one_of(responses, json_values))),
    merged(
        st.sampled_from([{"type": t} for t in ce.KNOWN_TYPES]),
        st.dictionaries(st.text(max_size=8), json_values, max_size=2),
    ),
)


# mostly valid events over a small pool of ids, so that sequences reach deep states
pool = st.sampled_from(["a", "b", "c", *(f"item_f_{n}" for n in range(2, 14))])
#: "@assistant" / "@last": replaced by the latest reply's / item's id when the event is sent
refs = st.sampled_from(["@assistant", "@last", "a", "item_f_3"])
plausible_events = st.one_of(
    st.builds(
        lambda iid, prev, words: {
            "type": "conversation.item.create",
            "previous_item_id": prev,
            "item": {
                "type": "message",
                "role": "user",
                "id": iid,
                "content": [{"type": "input_text", "text": words}],
            },
        },
        pool,
        st.one_of(st.none(), st.just("root"), pool),
        st.text(max_size=10),
    ),
    st.builds(
        lambda n: {"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x00" * n).decode()},
        st.sampled_from([9600, 4800, 2400, 480, 1, 0]),
    ),
    st.sampled_from([{"type": "input_audio_buffer.commit"}, {"type": "input_audio_buffer.clear"}]),
    st.builds(lambda iid: {"type": "conversation.item.delete", "item_id": iid}, refs),
    st.builds(lambda iid: {"type": "conversation.item.retrieve", "item_id": iid}, refs),
    st.builds(
        lambda iid, ms: {
            "type": "conversation.item.truncate",
            "item_id": iid,
            "content_index": 0,
            "audio_end_ms": ms,
        },
        refs,
        st.sampled_from([10, 0, 5, 20, 21, 40]),
    ),
    st.builds(
        lambda conv, mod, refs: {
            "type": "response.create",
            "response": {
                "conversation": conv,
                "output_modalities": [mod],
                **(
                    {"input": [{"type": "item_reference", "id": r} for r in refs]} if refs is not None else {}
                ),
            },
        },
        st.sampled_from(["auto", "none"]),
        st.sampled_from(["audio", "text"]),
        st.one_of(st.none(), st.lists(pool, max_size=2)),
    ),
    st.sampled_from(
        [
            {"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"]}},
            {"type": "session.update", "session": {"type": "realtime", "output_modalities": ["audio"]}},
            {
                "type": "session.update",
                "session": {"type": "realtime", "audio": {"output": {"format": {"type": "audio/pcmu"}}}},
            },
            {
                "type": "session.update",
                "session": {"type": "realtime", "tools": [{"type": "function", "name": "f"}]},
            },
        ]
    ),
)
#: mostly plausible events, some garbage among them
session_events = st.integers(0, 4).flatmap(lambda n: typed_events if n == 4 else plausible_events)


def dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=True)


frames = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=100),
    json_values.map(dumps),
    typed_events.map(dumps),
    st.integers(min_value=1, max_value=5000).map(lambda n: "[" * n),
    st.integers(min_value=1, max_value=80).map(
        lambda n: '{"type":"response.create","response":' + "[" * n + "]" * n + "}"
    ),
    st.integers(min_value=1, max_value=3000).map(
        lambda n: '{"type":"response.cancel","response_id":' + "9" * n + "}"
    ),
    st.sampled_from(
        ["NaN", "Infinity", '{"type":"conversation.item.truncate","audio_end_ms":-Infinity}', '"x"']
    ),
)


def check_error(error: ProtocolError) -> None:
    assert isinstance(error.code, ErrorCode)
    assert 0 < len(error.message) <= MAX_ERROR_CHARS
    sent = encode(ErrorOccurred(error), "event_1")
    json.dumps(sent, ensure_ascii=False).encode("utf-8")  # sendable: no lone surrogates
    validate_server_event(sent)


def check_sendable(value: Any) -> None:
    """Anything accepted can be written back to a client (items echo in server events)."""
    json.dumps(repr(value), ensure_ascii=False).encode("utf-8")


@MANY
@given(frames)
def test_any_frame_is_an_event_or_an_error(frame: str | bytes) -> None:
    result = ce.parse_client_event(frame, max_bytes=4096)
    if isinstance(result, ProtocolError):
        check_error(result)
    else:
        check_sendable(result)


@MANY
@given(typed_events)
def test_known_events_with_any_fields(event: dict[str, Any]) -> None:
    result = ce.parse_client_event(dumps(event))
    if isinstance(result, ProtocolError):
        check_error(result)
        if (
            isinstance(event.get("event_id"), str)
            and len(event["event_id"]) < 100
            and "\ud800" not in event["event_id"]
        ):
            assert result.event_id == event["event_id"]
        return
    check_sendable(result)
    match result:
        case ce.TruncateItem(content_index=index, audio_end_ms=ms):
            assert type(index) is int and type(ms) is int and index >= 0 and ms >= 0
        case ce.AppendInputAudio(audio=audio):
            assert isinstance(audio, bytes)
        case ce.CreateItem(item=item):
            assert isinstance(item, Message | FunctionCall) or item.call_id


class MiniSession:
    """A session's pure state, driven by client events as the connection layer will."""

    def __init__(self) -> None:
        self.ids = Ids("f")
        self.conv = Conversation(self.ids, max_items=8)
        self.input = InputSequencer(self.conv)
        self.cfg = initial_config(PROFILE)

    def apply(self, event: ce.ClientEvent) -> list[ServerEvent]:
        match event:
            case ce.UpdateSession(session=update):
                self.cfg = apply_update(self.cfg, update, PROFILE)
                return []
            case ce.AppendInputAudio(audio=audio):
                self.input.appended(self.cfg.input_format.duration_ms(len(audio)))
                return []
            case ce.CommitInputAudio():
                return self.input.commit(manual=True)
            case ce.ClearInputAudio():
                return self.input.clear()
            case ce.CreateItem(item=item, previous_item_id=previous):
                return self.conv.create(item, previous)
            case ce.RetrieveItem(item_id=iid):
                return self.conv.retrieve(iid)
            case ce.DeleteItem(item_id=iid):
                return self.conv.delete(iid)
            case ce.TruncateItem(item_id=iid, content_index=index, audio_end_ms=ms):
                return self.conv.truncate(iid, index, ms)
            case ce.CreateResponse(response=params):
                settings = resolve_response(params, self.cfg, PROFILE)
                self.conv.context(settings.input)
                seq = ResponseSequencer(settings, self.ids, self.conv)
                events = seq.created()
                if settings.output_modality.value == "text":
                    events += seq.text("Hello.")
                else:
                    events += seq.audio(b"\x00" * 960, 480, "Hello.")
                return events + seq.finish()
            case ce.CancelResponse() | ce.ClearOutputAudio():
                return []


def resolve_refs(event: dict[str, Any], conv: Conversation) -> dict[str, Any]:
    """``item_id`` "@assistant" / "@last" -> the id of the latest reply / item (if any)."""
    if event.get("item_id") not in ("@assistant", "@last"):
        return event
    replies_only = event["item_id"] == "@assistant"
    found = [
        i.id
        for i in conv.items
        if not replies_only or (isinstance(i, Message) and i.role.value == "assistant")
    ]
    return {**event, "item_id": found[-1] if found else "none"}


@SEQUENCES
@given(st.lists(session_events, max_size=16))
def test_any_event_sequence_keeps_the_session_consistent(events: list[dict[str, Any]]) -> None:
    session = MiniSession()
    for n, event in enumerate(events):
        if event.get("item_id") == "@assistant":  # the latest reply, whatever its id
            replies = [
                i.id for i in session.conv.items if isinstance(i, Message) and i.role.value == "assistant"
            ]
            event = {**event, "item_id": replies[-1] if replies else "none"}
        parsed = ce.parse_client_event(dumps(event))
        if isinstance(parsed, ProtocolError):
            continue
        before = session.conv.items
        try:
            answer = session.apply(parsed)
        except RealtimeClientError as exc:
            check_error(exc.error)
            assert session.conv.items == before  # a refused event changes nothing
            continue
        for m, server_event in enumerate(answer):
            validate_server_event(encode(server_event, f"event_{n}_{m}"))
        item_ids = [i.id for i in session.conv.items]
        assert len(item_ids) == len(set(item_ids)) and len(item_ids) <= 8 and all(item_ids)
