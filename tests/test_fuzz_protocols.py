"""Hypothesis fuzzing of the three wire parsers, without I/O (thousands of cases each).

Properties, for any input whatsoever:

* ``/ws`` (:class:`ClientProtocol`): a text or binary frame either decodes to a
  message / PCM16 samples or raises :class:`ClientMessageError` with one of the
  protocol's codes and a short message -- never anything else; the parser's state
  (started or not) only changes on a good ``start``.
* Twilio (:class:`TwilioProtocol`): a text frame is an event or a
  :class:`TwilioMessageError`; ``stream_sid`` is set once, by a good ``start``.
* AudioSocket (:class:`AudioSocketParser`): any byte stream, cut anywhere, gives
  the same events as the whole stream, raises nothing but :class:`AudioSocketError`,
  and never buffers more than one frame.

Reproducible: ``derandomize=True`` and no example database (the examples are
derived from the test, not a random seed or earlier runs), no deadline (CI
machines are slow and shared).
"""

from __future__ import annotations

import base64
import itertools
import json
import struct
import uuid
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voice_pipeline.server.protocol import (
    KNOWN_TYPES,
    ClientMessageError,
    ClientProtocol,
    ErrorCode,
    Playback,
    Start,
    error_message,
    parse_message,
)
from voice_pipeline.telephony.audiosocket import (
    HEADER_BYTES,
    MAX_AUDIO_BYTES,
    SLIN_RATES_HZ,
    AudioReceived,
    AudioSocketError,
    AudioSocketEvent,
    AudioSocketParser,
    CallIdentified,
    Kind,
    frame,
)
from voice_pipeline.telephony.twilio import (
    MAX_PAYLOAD_BYTES,
    MediaReceived,
    StreamStarted,
    TwilioEvent,
    TwilioMessageError,
    TwilioProtocol,
)

MANY = settings(
    max_examples=2000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SEQUENCES = settings(
    max_examples=800,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SOME = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
MAX_FRAME = 4096
MAX_ERROR_CHARS = 300  # an error message never echoes the client's megabyte back

# ---------------------------------------------------------------- JSON-ish values

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["", "start", "pcm16", "16000", "audio/x-mulaw", "inbound", "\x00", "\ud7ff"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
rates = st.one_of(
    st.sampled_from([8000, 16000, 44100, 48000, 7999, 48001, 0, -1]),
    st.integers(),
    st.just(True),
    st.just(16000.0),
    st.just("16000"),
    st.none(),
)


def maybe(key: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``{key: value}`` or ``{}``: a field present or missing."""
    return st.one_of(st.just({}), values.map(lambda v: {key: v}))


def merged(*parts: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(*parts).map(lambda ds: {k: v for d in ds for k, v in d.items()})


ws_start = merged(
    st.just({"type": "start"}),
    maybe("version", st.one_of(st.just(1), json_values)),
    maybe("sample_rate", rates),
    maybe("output_sample_rate", rates),
    maybe("format", st.one_of(st.just("pcm16"), json_values)),
    maybe(
        "capabilities",
        st.one_of(
            json_values,
            st.dictionaries(
                st.sampled_from(["playback_reports", "echo_cancellation", "x"]), json_values, max_size=3
            ),
        ),
    ),
)
ws_other = merged(
    st.one_of(st.sampled_from(KNOWN_TYPES), json_values).map(lambda t: {"type": t}),
    maybe("played", st.one_of(st.integers(), json_values)),
    maybe("cleared", st.one_of(st.integers(), json_values)),
    st.dictionaries(st.text(max_size=6), json_values, max_size=2),
)


def dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=True)


ws_text = st.one_of(
    st.text(max_size=200),
    json_values.map(dumps),
    ws_start.map(dumps),
    ws_other.map(dumps),
    st.integers(min_value=1, max_value=5000).map(lambda n: "[" * n),  # deeper than json.loads goes
    st.integers(min_value=1, max_value=3000).map(lambda n: '{"type":"start","version":' + "9" * n + "}"),
    st.sampled_from(["NaN", "Infinity", '{"type":"playback","played":1e999}', "{" * 100 + "}" * 100]),
)
ws_binary = st.one_of(
    st.binary(max_size=64),
    st.integers(min_value=0, max_value=3 * MAX_FRAME).map(lambda n: b"\x01" * n),
)


def check_error(exc: ClientMessageError) -> None:
    assert isinstance(exc.code, ErrorCode)
    assert 0 < len(str(exc)) <= MAX_ERROR_CHARS
    json.dumps(error_message(exc.code, str(exc)))  # always sendable


# ---------------------------------------------------------------- /ws


@MANY
@given(ws_text)
def test_ws_text_is_a_message_or_a_client_error(text: str) -> None:
    try:
        parse_message(text)
    except ClientMessageError as exc:
        check_error(exc)


@MANY
@given(ws_start)
def test_ws_start_is_accepted_only_with_valid_fields(msg: dict[str, Any]) -> None:
    try:
        start = parse_message(dumps(msg))
    except ClientMessageError as exc:
        check_error(exc)
        return
    assert isinstance(start, Start)
    assert msg["version"] == 1 and msg.get("format", "pcm16") == "pcm16"
    assert 8000 <= start.sample_rate_hz <= 48000 and 8000 <= start.output_rate_hz <= 48000
    assert type(msg["sample_rate"]) is int


@MANY
@given(ws_other)
def test_ws_playback_fields_are_non_negative_integers(msg: dict[str, Any]) -> None:
    try:
        decoded = parse_message(dumps(msg))
    except ClientMessageError as exc:
        check_error(exc)
        return
    if isinstance(decoded, Playback):
        assert type(decoded.played) is int and decoded.played >= 0
        assert decoded.cleared is None or type(decoded.cleared) is int


@SEQUENCES
@given(st.lists(st.one_of(ws_text, ws_binary, ws_start.map(dumps)), max_size=12))
def test_ws_any_frame_sequence(frames: list[str | bytes]) -> None:
    proto = ClientProtocol(MAX_FRAME)
    for data in frames:
        started = proto.start
        try:
            if isinstance(data, str):
                msg = proto.text(data)
                if isinstance(msg, Start):
                    assert started is None and proto.start is msg
                else:
                    assert started is not None
            else:
                pcm = proto.binary(data)
                assert started is not None
                assert len(data) <= MAX_FRAME and len(data) % 2 == 0
                assert pcm.dtype == np.int16 and len(pcm) == len(data) // 2
        except ClientMessageError as exc:
            check_error(exc)
            assert proto.start is started  # a refused frame changes nothing


# ---------------------------------------------------------------- Twilio

SID = "MZ00"
sids = st.one_of(st.just(SID), json_values)
b64 = st.one_of(
    st.binary(max_size=400).map(lambda b: base64.b64encode(b).decode()),
    st.text(max_size=40),
    st.integers(min_value=0, max_value=2 * MAX_PAYLOAD_BYTES).map(lambda n: "A" * n),
    json_values,
)
numbers = st.one_of(st.integers(), st.text(max_size=8), json_values, st.just("1e5"), st.just(float("inf")))
media_format = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "encoding": st.one_of(st.just("audio/x-mulaw"), json_values),
            "sampleRate": st.one_of(st.just(8000), st.just("8000"), numbers),
            "channels": st.one_of(st.just(1), numbers),
        },
    ),
)
twilio_start = st.fixed_dictionaries(
    {"event": st.just("start")},
    optional={
        "streamSid": sids,
        "start": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {},
                optional={
                    "streamSid": sids,
                    "callSid": json_values,
                    "tracks": json_values,
                    "customParameters": st.one_of(
                        json_values, st.dictionaries(st.text(max_size=6), json_values, max_size=3)
                    ),
                    "mediaFormat": media_format,
                },
            ),
        ),
    },
)
twilio_other = st.fixed_dictionaries(
    {"event": st.one_of(st.sampled_from(["connected", "media", "dtmf", "mark", "stop"]), json_values)},
    optional={
        "streamSid": sids,
        "protocol": json_values,
        "media": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {}, optional={"payload": b64, "track": json_values, "chunk": numbers, "timestamp": numbers}
            ),
        ),
        "dtmf": st.one_of(json_values, st.fixed_dictionaries({}, optional={"digit": json_values})),
        "mark": st.one_of(json_values, st.fixed_dictionaries({}, optional={"name": json_values})),
    },
)
good_start = dumps(
    {
        "event": "start",
        "streamSid": SID,
        "start": {
            "streamSid": SID,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        },
    }
)
twilio_text = st.one_of(
    st.text(max_size=200),
    json_values.map(dumps),
    twilio_start.map(dumps),
    twilio_other.map(dumps),
    st.just(good_start),
    st.integers(min_value=1, max_value=5000).map(lambda n: "[" * n),
    st.integers(min_value=1, max_value=3000).map(lambda n: '{"event":"media","x":' + "9" * n + "}"),
    st.integers(min_value=1, max_value=3000).map(
        lambda n: '{"event":"start","streamSid":"S","start":{"callSid":' + "[" * n + "]" * n + "}}"
    ),
)


@SEQUENCES
@given(st.lists(twilio_text, max_size=10))
def test_twilio_any_message_sequence(texts: list[str]) -> None:
    proto = TwilioProtocol()
    for text in texts:
        sid = proto.stream_sid
        try:
            event: TwilioEvent = proto.receive(text)
        except TwilioMessageError as exc:
            assert 0 < len(str(exc)) <= MAX_ERROR_CHARS
            assert proto.stream_sid == sid
            continue
        if isinstance(event, StreamStarted):
            assert sid is None and proto.stream_sid == event.stream_sid and event.stream_sid
            assert all(isinstance(v, str) for v in event.custom_parameters.values())
        else:
            assert proto.stream_sid == sid
        if isinstance(event, MediaReceived):
            assert len(event.payload) <= MAX_PAYLOAD_BYTES + 3


# ---------------------------------------------------------------- AudioSocket

kinds = st.one_of(st.sampled_from([0x00, 0x01, 0x03, 0x10, 0x12, 0x16, 0x18, 0xFF]), st.integers(0, 255))
raw_frames = st.one_of(
    st.tuples(kinds, st.binary(max_size=40)).map(lambda kp: frame(*kp)),
    st.tuples(kinds, st.integers(0, 0xFFFF), st.binary(max_size=20)).map(
        lambda k: bytes([k[0]]) + struct.pack(">H", k[1]) + k[2]  # a lying length
    ),
    st.sampled_from(list(SLIN_RATES_HZ)).flatmap(
        lambda kind: st.integers(0, MAX_AUDIO_BYTES // 2 + 2).map(lambda n: frame(kind, b"\x01\x02" * n))
    ),
    st.binary(max_size=8),
)
uuid_frame = frame(Kind.UUID, uuid.UUID(int=7).bytes)
streams = st.lists(raw_frames, max_size=8).flatmap(
    lambda fs: st.sampled_from([b"".join(fs), uuid_frame + b"".join(fs)])
)


def parse_all(data: bytes, cuts: list[int]) -> tuple[list[AudioSocketEvent], bool]:
    """Events from ``data`` fed in pieces cut at ``cuts``, and whether it ended in an error."""
    parser = AudioSocketParser()
    events: list[AudioSocketEvent] = []
    bounds = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    for a, b in itertools.pairwise(bounds):
        try:
            events += parser.feed(data[a:b])
        except AudioSocketError as exc:
            assert 0 < len(str(exc)) <= MAX_ERROR_CHARS
            return events, True
        assert parser.pending < HEADER_BYTES + MAX_AUDIO_BYTES
    return events, False


@SEQUENCES
@given(streams, st.lists(st.integers(min_value=0), max_size=6))
def test_audiosocket_any_byte_stream(data: bytes, cuts: list[int]) -> None:
    events, failed = parse_all(data, cuts)
    whole, whole_failed = parse_all(data, [])
    assert failed == whole_failed
    if not failed:
        assert events == whole  # where the stream is cut does not matter
    identified = False
    for e in events:
        if isinstance(e, CallIdentified):
            assert not identified  # one UUID per call
            identified = True
        if isinstance(e, AudioReceived):
            assert identified  # no audio before the UUID
            assert len(e.pcm) % 2 == 0 and len(e.pcm) <= MAX_AUDIO_BYTES


@SOME
@given(st.binary(min_size=1, max_size=2000))
def test_audiosocket_garbage_after_the_uuid(data: bytes) -> None:
    parse_all(uuid_frame + data, [1, 5, 19, 40])
