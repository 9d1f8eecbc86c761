"""Hypothesis fuzzing of /v1/realtime through a running server, over real sockets (fake
engines), as tests/test_fuzz_server.py does for /ws, /twilio and AudioSocket.

Each example opens a connection, sends a generated sequence of frames -- client events
the openai SDK's own types can express (as the SDK sends them), their near misses, and
junk: bad JSON, binary frames, deep nesting, huge numbers, events over the size limit --
then a marker event. What comes back is checked against the pure parser run on the same
frames: every frame the parser refuses is answered by an ``error`` with the parser's
code and the frame's ``event_id``, in order (frames it accepts may be refused for what
they ask, e.g. a commit with nothing to commit: more errors in between are allowed);
the marker's error says everything before it was read; the connection is still open;
no two responses were said to play at once (``output_audio_buffer.started`` of one
before the other's ``stopped`` or ``cleared``); and nothing was logged at ERROR (no
handler raised, no task failed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from fakes import Fakes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from realtime_sdk import sdk_client_events
from test_fuzz_server import ErrorLog
from websockets.asyncio.client import connect

from voice_pipeline.config import load_config
from voice_pipeline.realtime.client_events import parse_client_event
from voice_pipeline.realtime.errors import ProtocolError
from voice_pipeline.server.app import VoiceServer

T = TypeVar("T")
EVENT_LIMIT = 8192
EXAMPLE_TIMEOUT_S = 20.0
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
MARKER = json.dumps({"type": "fuzz.marker", "event_id": "marker"})


@dataclasses.dataclass
class Server:
    loop: asyncio.AbstractEventLoop
    voice: VoiceServer
    errors: ErrorLog

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, EXAMPLE_TIMEOUT_S))

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.voice.port}/v1/realtime?model=fuzz"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    base = load_config(None)
    cfg = dataclasses.replace(
        base,
        server=dataclasses.replace(
            base.server,
            port=0,
            max_sessions=4,
            max_new_sessions_per_ip_per_min=0,
            max_realtime_event_bytes=EVENT_LIMIT,
        ),
    )
    loop = asyncio.new_event_loop()
    fakes = Fakes()
    fakes.llm.reply = "Fine."
    voice = VoiceServer(fakes.engines(), cfg)
    errors = ErrorLog()
    logging.getLogger().addHandler(errors)
    loop.run_until_complete(voice.start())
    try:
        yield Server(loop, voice, errors)
    finally:
        loop.run_until_complete(voice.aclose())
        logging.getLogger().removeHandler(errors)
        loop.close()


def _mutate(text: str, key: str, value: Any) -> str:
    """A near miss: the SDK's event with one field added or changed."""
    data = json.loads(text)
    data[key] = value
    return json.dumps(data)


KEYS = ["event_id", "type", "bogus", "session", "audio", "item", "response"]
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10))
frames = st.one_of(
    sdk_client_events(),
    sdk_client_events(),
    st.tuples(sdk_client_events(), st.sampled_from(KEYS), json_scalars).map(lambda t: _mutate(*t)),
    st.text(max_size=60),
    st.binary(max_size=40),
    st.integers(1, 2000).map(lambda n: "[" * n),
    st.just('{"type": "session.update", "session": {"type": "realtime", "x": 1e999}}'),
    st.just('{"type": "input_audio_buffer.append", "audio": "' + "A" * (EVENT_LIMIT + 100) + '"}'),
    st.just(json.dumps({"type": "input_audio_buffer.append", "audio": "AAAA" * 200, "event_id": "a"})),
)  # fmt: skip


def expected_errors(sent: list[str | bytes]) -> list[tuple[str, str | None]]:
    out = []
    for frame in sent:
        result = parse_client_event(frame, max_bytes=EVENT_LIMIT)
        if isinstance(result, ProtocolError):
            out.append((str(result.code), result.event_id))
    return out


def is_subsequence(needles: list[Any], haystack: list[Any]) -> bool:
    it = iter(haystack)
    return all(any(n == h for h in it) for n in needles)


async def exchange(url: str, sent: list[str | bytes]) -> None:
    async with connect(url, max_size=None) as ws:
        for frame in sent:
            await ws.send(frame)
        await ws.send(MARKER)
        errors: list[tuple[str, str | None]] = []
        playing: set[str] = set()  # responses whose audio the server says plays now
        while True:
            msg = json.loads(await ws.recv())
            if msg["type"] == "output_audio_buffer.started":
                assert not playing, (playing, msg)  # one response is heard at a time
                playing.add(msg["response_id"])
            elif msg["type"] in ("output_audio_buffer.stopped", "output_audio_buffer.cleared"):
                playing.discard(msg["response_id"])
            if msg["type"] != "error":
                continue
            error = msg["error"]
            assert error["message"] and len(error["message"]) < 1000
            errors.append((error["code"], error["event_id"]))
            if error["event_id"] == "marker":
                break
        assert errors[-1] == ("unknown_event_type", "marker")
        assert is_subsequence(expected_errors(sent), errors[:-1]), (expected_errors(sent), errors)
        assert ws.close_code is None  # still open: the session went on


@FUZZ
@given(st.lists(frames, max_size=6))
def test_realtime_fuzz_every_bad_event_is_answered(server: Server, sent: list[str | bytes]) -> None:
    server.run(exchange(server.url, sent))
    assert not server.errors.records, [r.getMessage() for r in server.errors.records]
