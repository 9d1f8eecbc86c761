"""Hypothesis fuzzing through running servers, over real sockets (fake engines).

A real :class:`VoiceServer` (``/ws`` and ``/twilio``) and a real
:class:`AudioSocketServer` run on one event loop of their own; each example
opens a connection, sends a generated sequence of frames and checks what comes
back against the pure parser run on the same frames:

* ``/ws``: every frame the parser refuses is answered by an ``error`` with the
  parser's code, in order; a good ``start`` by ``ready``; ``stop`` by close 1000;
  invalid UTF-8 in a text frame by close 1007 and a frame over the size limit
  (e.g. 1 MB of text) by close 1009, each with a reason.
* ``/twilio``: every unusable message is counted and the call goes on; a fatal
  one closes the stream with a reason.
* AudioSocket: a stream the parser refuses, a hangup or an error frame ends the
  call with a hangup frame and EOF; anything else keeps it up until our EOF.

Always: no exception escapes a handler (nothing logged at ERROR), every example
ends within a timeout, and afterwards a good client still gets a full turn.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import numpy as np
import pytest
from fakes import Fakes, tone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polling import until
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from wsclient import voice_client

from voice_pipeline.audio import to_int16
from voice_pipeline.config import Config, load_config
from voice_pipeline.server.app import VoiceServer
from voice_pipeline.server.protocol import ClientMessageError, ClientProtocol, Start, Stop
from voice_pipeline.telephony.audiosocket import (
    AudioSocketError,
    AudioSocketParser,
    ErrorReceived,
    HungUp,
    Kind,
    frame,
)
from voice_pipeline.telephony.audiosocket_server import AudioSocketServer
from voice_pipeline.telephony.twilio import TwilioMessageError, TwilioProtocol
from voice_pipeline.telephony.twilio_connection import TwilioConnection

T = TypeVar("T")
MAX_FRAME = 2048
EXAMPLE_TIMEOUT_S = 20.0
FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class ErrorLog(logging.Handler):
    """Collects every record at ERROR or above (a handler's exception, a task that failed)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclasses.dataclass
class Servers:
    loop: asyncio.AbstractEventLoop
    voice: VoiceServer
    audiosocket: AudioSocketServer
    errors: ErrorLog
    cfg: Config

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = EXAMPLE_TIMEOUT_S) -> T:
        """Run ``coro`` on the servers' loop; a hang fails the test."""
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout_s))

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.voice.port}/ws"

    @property
    def twilio_url(self) -> str:
        return f"ws://127.0.0.1:{self.voice.port}/twilio"

    def check_clean(self) -> None:
        assert not self.errors.records, [r.getMessage() for r in self.errors.records]


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    base = load_config(None)
    cfg = dataclasses.replace(
        base,
        server=dataclasses.replace(
            base.server,
            port=0,
            max_frame_bytes=MAX_FRAME,
            max_sessions=4,
            max_new_sessions_per_ip_per_min=0,
            idle_timeout_s=30.0,
        ),
    )
    loop = asyncio.new_event_loop()
    engines = Fakes().engines()
    voice = VoiceServer(engines, cfg)
    audiosocket = AudioSocketServer(engines, cfg, "127.0.0.1", 0)
    errors = ErrorLog()
    logging.getLogger().addHandler(errors)
    loop.run_until_complete(voice.start())
    loop.run_until_complete(audiosocket.start())
    try:
        yield Servers(loop, voice, audiosocket, errors, cfg)
    finally:
        loop.run_until_complete(voice.aclose())
        loop.run_until_complete(audiosocket.aclose())
        logging.getLogger().removeHandler(errors)
        loop.close()


# ---------------------------------------------------------------- /ws


@dataclasses.dataclass(frozen=True)
class RawText:
    """A text frame carrying these bytes as they are (possibly not UTF-8)."""

    data: bytes


@dataclasses.dataclass(frozen=True)
class BigText:
    """A text frame of ``size`` characters (made when sent: keeps reports readable)."""

    size: int

    @property
    def text(self) -> str:
        return "x" * self.size


Frame = str | bytes | RawText | BigText


def start_text(rate: int = 16000, **extra: Any) -> str:
    return json.dumps({"type": "start", "version": 1, "sample_rate": rate, "format": "pcm16", **extra})


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10))
ws_messages = st.one_of(
    st.just(start_text()),
    st.just(start_text(8000, output_sample_rate=48000)),
    st.sampled_from(["start", "playback", "interrupt", "ptt.start", "ptt.end", "stop", "bogus"]).flatmap(
        lambda kind: st.dictionaries(
            st.sampled_from(["version", "sample_rate", "played", "cleared", "format", "capabilities"]),
            json_scalars,
            max_size=3,
        ).map(lambda d: json.dumps({"type": kind, **d}))
    ),
    st.text(max_size=60),
    st.integers(1, 3000).map(lambda n: "[" * n),
)
ws_frames: st.SearchStrategy[Frame] = st.one_of(
    ws_messages,
    ws_messages,
    st.binary(max_size=80),
    st.integers(0, 2 * MAX_FRAME + 2).map(lambda n: b"\x00\x01" * (n // 2) + b"\x07" * (n % 2)),
    st.binary(min_size=1, max_size=12).map(lambda b: RawText(b"\xff" + b)),  # never UTF-8
    st.just(BigText(1_000_000)),  # 1 MB text frame
    st.just(b""),  # zero-length audio
    st.just(b"\x00"),  # odd length
)


@dataclasses.dataclass(frozen=True)
class Expect:
    answers: list[str]  # "ready" or an error code, in order
    close: int | None  # the close code that ends the sequence, if any


def expect_ws(frames: list[Frame], max_message: int) -> tuple[list[Frame], Expect]:
    """What the server must answer, per the pure parser; frames after a close are not sent."""
    proto = ClientProtocol(MAX_FRAME)
    answers: list[str] = []
    for i, f in enumerate(frames):
        sent = frames[: i + 1]
        if isinstance(f, BigText):
            f = f.text
        if isinstance(f, RawText):
            try:
                f.data.decode("utf-8")
            except UnicodeDecodeError:
                return sent, Expect(answers, 1007)
            f = f.data.decode()
        size = len(f.encode()) if isinstance(f, str) else len(f)
        if size > max_message:
            return sent, Expect(answers, 1009)
        try:
            msg = proto.text(f) if isinstance(f, str) else proto.binary(f)
        except ClientMessageError as exc:
            answers.append(str(exc.code))
            continue
        if isinstance(msg, Start):
            answers.append("ready")
        elif isinstance(msg, Stop):
            return sent, Expect(answers, 1000)
    return frames, Expect(answers, None)


MARKER = json.dumps({"type": "fuzz.marker"})  # its unknown_type error says all before it was read


async def ws_exchange(url: str, frames: list[Frame], expect: Expect) -> None:
    async with connect(url, max_size=None) as ws:
        for f in frames:
            try:
                if isinstance(f, RawText):
                    await ws.send(f.data, text=True)
                elif isinstance(f, BigText):
                    await ws.send(f.text)
                else:
                    await ws.send(f)
            except ConnectionClosed:
                break
        if expect.close is None:
            await ws.send(MARKER)
        answers: list[str] = []
        try:
            while True:
                data = await ws.recv()
                if isinstance(data, bytes):
                    continue  # reply audio (the fake VAD may hear a turn in random audio)
                msg = json.loads(data)
                if msg["type"] == "ready":
                    answers.append("ready")
                elif msg["type"] == "error":
                    assert msg["message"] and len(msg["message"]) < 300
                    answers.append(msg["code"])
                    if expect.close is None and len(answers) == len(expect.answers) + 1:
                        break
        except ConnectionClosed:
            pass
        if expect.close is None:
            assert answers == [*expect.answers, "unknown_type"]
            assert ws.close_code is None  # still open: the session went on
        else:
            await ws.wait_closed()
            # the close answers the frame that caused it; answers still queued for
            # earlier frames may be cut off by it (the client sent on without reading)
            assert answers == expect.answers[: len(answers)]
            assert ws.close_code == expect.close
            assert ws.close_reason  # a clean close says why


@FUZZ
@given(st.lists(ws_frames, max_size=8), st.booleans())
def test_ws_fuzz_every_bad_frame_is_answered(servers: Servers, frames: list[Frame], begin: bool) -> None:
    if begin:
        frames = [start_text(), *frames]
    sent, expect = expect_ws(frames, servers.voice.max_message_bytes)
    servers.run(ws_exchange(servers.ws_url, sent, expect))
    servers.check_clean()


# ---------------------------------------------------------------- /twilio

SID = "MZfuzz"
GOOD_START = json.dumps(
    {
        "event": "start",
        "streamSid": SID,
        "start": {
            "streamSid": SID,
            "callSid": "CA1",
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        },
    }
)
twilio_messages = st.one_of(
    st.just(GOOD_START),
    st.sampled_from(["connected", "start", "media", "dtmf", "mark", "stop", "bogus"]).flatmap(
        lambda event: st.fixed_dictionaries(
            {"event": st.just(event)},
            optional={
                "streamSid": st.one_of(st.just(SID), json_scalars),
                "media": st.one_of(
                    json_scalars,
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "payload": st.one_of(
                                st.binary(max_size=320).map(lambda b: base64.b64encode(b).decode()),
                                json_scalars,
                            ),
                            "chunk": json_scalars,
                        },
                    ),
                ),
                "mark": st.fixed_dictionaries({"name": json_scalars}),
                "dtmf": st.fixed_dictionaries({"digit": json_scalars}),
                "start": st.fixed_dictionaries(
                    {},
                    optional={
                        "streamSid": json_scalars,
                        "mediaFormat": st.fixed_dictionaries(
                            {"encoding": st.just("audio/x-mulaw"), "sampleRate": json_scalars}
                        ),
                    },
                ),
            },
        ).map(json.dumps)
    ),
    st.text(max_size=60),
    st.binary(max_size=40),  # Media Streams never sends binary frames
)


async def twilio_exchange(servers: Servers, frames: list[str | bytes]) -> None:
    proto = TwilioProtocol()
    errors, close = 0, False
    sent: list[str | bytes] = []
    for f in frames:
        sent.append(f)
        if isinstance(f, bytes):
            errors += 1
            continue
        try:
            event = proto.receive(f)
        except TwilioMessageError as exc:
            errors += 1
            if exc.fatal:
                close = True
                break
            continue
        if type(event).__name__ == "StreamStopped":
            close = True
            break
    # the previous example's call has ended
    await until(lambda: not any(isinstance(c, TwilioConnection) for c in servers.voice.connections))
    async with connect(servers.twilio_url, max_size=None) as ws:
        for f in sent:
            try:
                await ws.send(f)
            except ConnectionClosed:
                break
        if close:
            with pytest.raises(ConnectionClosed):
                while True:
                    await ws.recv()
            assert ws.close_code in (1000, 1003) and ws.close_reason
            return
        # still up: the server counted every unusable message
        conns = [c for c in servers.voice.connections if isinstance(c, TwilioConnection)]
        assert len(conns) == 1
        await until(lambda: conns[0].errors >= errors)
        assert conns[0].errors == errors and ws.close_code is None


@FUZZ
@given(st.lists(twilio_messages, max_size=8), st.booleans())
def test_twilio_fuzz_bad_messages_are_counted_and_the_call_goes_on(
    servers: Servers, frames: list[str | bytes], begin: bool
) -> None:
    if begin:
        frames = [GOOD_START, *frames]
    servers.run(twilio_exchange(servers, frames))
    servers.check_clean()


# ---------------------------------------------------------------- AudioSocket

as_frames = st.one_of(
    st.tuples(
        st.one_of(st.sampled_from([0x00, 0x01, 0x03, 0x10, 0x12, 0x16, 0xFF]), st.integers(0, 255)),
        st.binary(max_size=40),
    ).map(lambda kp: frame(*kp)),
    st.sampled_from([0x10, 0x11, 0x16]).flatmap(
        lambda kind: st.integers(0, 400).map(lambda n: frame(kind, b"\x10\x27" * n))
    ),
    st.just(frame(Kind.DTMF, b"5")),
    st.binary(max_size=6),
)
UUID_FRAME = frame(Kind.UUID, uuid.UUID(int=99).bytes)


def audiosocket_ends(data: bytes) -> bool:
    """Does the server end the call on its own (parser error, hangup, error frame)?"""
    parser = AudioSocketParser()
    try:
        events = parser.feed(data)
    except AudioSocketError:
        return True
    return any(isinstance(e, HungUp | ErrorReceived) for e in events)


async def audiosocket_exchange(port: int, data: bytes) -> None:
    ends = audiosocket_ends(data)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        if not ends:
            await asyncio.sleep(0.02)
            writer.write_eof()  # the server must hang up on EOF too
        received = await reader.read()  # until the server closes
    finally:
        writer.close()
    # frames back: reply audio perhaps, then the hangup, then EOF
    pos, kinds = 0, []
    while pos + 3 <= len(received):
        length = int.from_bytes(received[pos + 1 : pos + 3], "big")
        kinds.append(received[pos])
        pos += 3 + length
    assert pos == len(received) and kinds and kinds[-1] == Kind.HANGUP


@FUZZ
@given(st.lists(as_frames, max_size=8), st.booleans())
def test_audiosocket_fuzz_bad_streams_end_with_a_hangup(
    servers: Servers, frames: list[bytes], begin: bool
) -> None:
    data = (UUID_FRAME if begin else b"") + b"".join(frames)
    servers.run(audiosocket_exchange(servers.audiosocket.port, data))
    servers.check_clean()


# ---------------------------------------------------------------- afterwards


async def good_ws_turn(url: str) -> dict[str, Any]:
    async with voice_client(url) as client:
        await client.start()
        client.start_microphone()
        client.say(np.concatenate([np.zeros(3200, np.float32), tone(0.8)]))
        return await client.wait_for(lambda m: m["type"] == "turn.latency", 30)


async def good_audiosocket_call(port: int) -> int:
    """A call that speaks; returns the reply audio frames received."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    speech = to_int16(tone(1.0, 8000)).astype("<i2").tobytes()
    writer.write(UUID_FRAME)
    for i in range(0, len(speech), 320):
        writer.write(frame(Kind.SLIN, speech[i : i + 320]))
    silence = frame(Kind.SLIN, b"\x00" * 320)
    got = 0
    try:
        async with asyncio.timeout(20):
            while got < 5:
                writer.write(silence * 5)
                await writer.drain()
                try:
                    async with asyncio.timeout(0.1):
                        head = await reader.readexactly(3)
                        body = await reader.readexactly(int.from_bytes(head[1:3], "big"))
                        if head[0] == Kind.SLIN and body:
                            got += 1
                except TimeoutError:
                    pass
    finally:
        writer.write(frame(Kind.HANGUP))
        writer.close()
    return got


def test_after_the_fuzzing_good_clients_are_still_served(servers: Servers) -> None:
    record = servers.run(good_ws_turn(servers.ws_url), 60)
    assert record["record"]["assistant_text"]
    assert servers.run(good_audiosocket_call(servers.audiosocket.port), 60) >= 5
    servers.check_clean()
    assert not servers.voice.connections or all(
        c.session is None or c.session.unfinished_tasks() == 0 for c in servers.voice.connections
    )


async def test_a_twilio_stream_sending_no_media_is_closed_as_idle() -> None:
    base = load_config(None)
    settings = {"port": 0, "idle_timeout_s": 0.6, "max_new_sessions_per_ip_per_min": 0}
    srv = VoiceServer(
        Fakes().engines(), dataclasses.replace(base, server=dataclasses.replace(base.server, **settings))
    )
    await srv.start()
    try:
        async with connect(f"ws://127.0.0.1:{srv.port}/twilio") as ws:
            await ws.send(GOOD_START)
            with pytest.raises(ConnectionClosed):
                async with asyncio.timeout(10):
                    while True:  # marks, DTMF and junk keep coming, but no audio
                        await ws.send(json.dumps({"event": "dtmf", "streamSid": SID, "dtmf": {"digit": "1"}}))
                        await ws.send("junk")
                        await asyncio.sleep(0.1)
            assert ws.close_code == 1000 and ws.close_reason.startswith("idle")
    finally:
        await srv.aclose()


async def test_an_audiosocket_call_sending_no_audio_is_ended_as_idle() -> None:
    base = load_config(None)
    cfg = dataclasses.replace(base, server=dataclasses.replace(base.server, idle_timeout_s=0.6))
    srv = AudioSocketServer(Fakes().engines(), cfg, "127.0.0.1", 0)
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(UUID_FRAME)
        with contextlib.suppress(ConnectionError):
            async with asyncio.timeout(10):
                while not reader.at_eof():  # DTMF keeps coming, but no audio
                    writer.write(frame(Kind.DTMF, b"1"))
                    await writer.drain()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.1):
                            await reader.read(4096)
        assert reader.at_eof()  # the server hung up
        writer.close()
    finally:
        await srv.aclose()
