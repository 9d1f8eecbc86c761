"""The ``/twilio`` endpoint end to end with the real models and a simulated Twilio caller.

The caller (tests/twilioclient.py) speaks espeak-ng questions as 20 ms µ-law
frames in real time, plays the reply like Twilio (real time, marks echoed once
played, all pending marks echoed on ``clear``), and records what arrived when.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from polling import until
from servers import running_server
from speech import espeak, normalize, recorded_speech, word_error_rate
from twilioclient import TwilioCaller, twilio_caller

from voice_pipeline.audio import resample, to_float32
from voice_pipeline.bench.paused import RECORDED_SENTENCES
from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.server.app import VoiceServer
from voice_pipeline.telephony import mulaw
from voice_pipeline.telephony.twilio_connection import TwilioConnection

pytestmark = pytest.mark.real_models

QUESTION = "What is the capital of France?"
STORY = "Tell me a long story about a brave knight and a dragon."
TOKEN = "s3cret-token"
NARROWBAND_WER = 0.4


@pytest.fixture(scope="module")
async def server(engines: Engines, config: Config) -> AsyncIterator[VoiceServer]:
    async with running_server(engines, config, max_sessions=4, twilio_token=TOKEN) as srv:
        yield srv


def url(srv: VoiceServer) -> str:
    return f"ws://127.0.0.1:{srv.port}/twilio"


def call_of(srv: VoiceServer, stream_sid: str) -> TwilioConnection:
    for conn in srv.connections:
        if isinstance(conn, TwilioConnection) and conn.transport and conn.transport.stream_sid == stream_sid:
            return conn
    raise AssertionError(f"no call {stream_sid}")


async def started(srv: VoiceServer, caller: TwilioCaller) -> TwilioConnection:
    await caller.start(TOKEN)
    async with asyncio.timeout(10):
        while True:
            with contextlib.suppress(AssertionError):
                return call_of(srv, caller.stream_sid)
            await asyncio.sleep(0.02)


async def wait_records(conn: TwilioConnection, n: int, timeout_s: float = 120) -> None:
    session = conn.session
    assert session is not None
    await until(lambda: len(session.ledger.records) >= n, timeout_s)


def reply_pcm(caller: TwilioCaller, since: float = 0.0) -> np.ndarray:
    payload = b"".join(
        base64.b64decode(r.msg["media"]["payload"]) for r in caller.of("media") if r.t >= since
    )
    return mulaw.decode(payload)


# ------------------------------------------------------------ one call


async def test_a_call_gets_a_paced_transcribable_reply_with_marks(server: VoiceServer, whisper: Any) -> None:
    async with twilio_caller(url(server)) as caller:
        conn = await started(server, caller)
        caller.say(espeak(QUESTION))
        await wait_records(conn, 1)
        assert conn.session is not None and conn.transport is not None
        record = conn.session.ledger.records[0]
        # narrowband µ-law costs tiny.en words ("capital on Friends?"): a looser bound than /ws
        assert word_error_rate(QUESTION, record.user_text) <= NARROWBAND_WER, record.user_text
        print(f"twilio transcript: {record.user_text!r}")
        assert not record.interrupted and record.assistant_text
        # every mark came back, the last one after the reply had played
        marks = caller.of("mark")
        assert marks and len(caller.marks_echoed) == len(marks)
        assert conn.transport.played_samples(record.turn_id) > 0
        media = caller.of("media")
        assert all(len(base64.b64decode(r.msg["media"]["payload"])) == 160 for r in media)
        # paced: 20 ms frames at real time, never the whole reply at once
        times = np.array([r.t for r in media])
        gaps_ms = np.diff(times) * 1000
        duration_s = len(media) * 0.02
        assert duration_s >= 1.0
        assert times[-1] - times[0] >= 0.7 * duration_s - 0.3, (times[-1] - times[0], duration_s)
        assert np.median(gaps_ms) == pytest.approx(20, abs=8), np.median(gaps_ms)
        assert caller.max_buffered <= 8000 * 0.4, caller.max_buffered  # ~100 ms lead; generous bound
        print(
            f"twilio reply: {len(media)} frames, {duration_s:.2f} s, gaps median {np.median(gaps_ms):.1f} ms "
            f"p95 {np.percentile(gaps_ms, 95):.1f} ms, max buffered at the far end "
            f"{caller.max_buffered / 8:.0f} ms, marks {len(marks)}"
        )
        pcm = reply_pcm(caller)
        heard = whisper.transcribe(resample(to_float32(pcm), 8000, 16000)).text
        assert word_error_rate(record.assistant_text, heard) <= 0.5, (record.assistant_text, heard)
        await caller.stop()
        code, reason = await caller.wait_closed()
        assert (code, reason) == (1000, "call ended")
    await until(lambda: conn not in server.connections, 10)
    assert conn.session.unfinished_tasks() == 0 and conn.transport.closed


async def test_barge_in_clears_the_call_and_truncates_the_turn(server: VoiceServer) -> None:
    async with twilio_caller(url(server)) as caller:
        conn = await started(server, caller)
        caller.say(espeak(STORY))
        await caller.wait_until(lambda: len(caller.of("media")) >= 75, 120)  # 1.5 s of reply sent
        assert caller.clears == 0
        caller.say(espeak(QUESTION))
        await caller.wait_until(lambda: caller.clears >= 1, 30)
        cleared_at = caller.of("clear")[0].t
        await wait_records(conn, 1, 30)
        assert conn.session is not None
        story = conn.session.ledger.records[0]
        assert story.interrupted
        assert "barge_in_stop" in story.stages_ms
        assert story.assistant_text.startswith(story.heard_text.rstrip(". "))
        assert 0 < story.work.audio_heard_s < story.work.audio_synthesized_s
        # nothing of the story after the clear: the next audio is the answer's
        await wait_records(conn, 2, 120)
        answer = conn.session.ledger.records[1]
        assert word_error_rate(QUESTION, answer.user_text) <= NARROWBAND_WER, answer.user_text
        assert answer.assistant_text and not answer.interrupted
        assert any(r.t > cleared_at for r in caller.of("media"))
        print(
            f"twilio barge-in: heard {story.work.audio_heard_s:.2f} s "
            f"of {story.work.audio_synthesized_s:.2f} s, "
            f"barge_in_stop {story.stages_ms['barge_in_stop']:.0f} ms"
        )


async def test_a_person_who_pauses_on_the_phone_is_heard_whole(server: VoiceServer) -> None:
    """A recorded reader (tests/data/human) says a sentence with two pauses made 0.8 s longer,
    over µ-law: every phrase reaches the assistant (in one turn, or two if a reply was heard
    long enough to be interrupted) and the last turn is answered aloud."""
    rec = RECORDED_SENTENCES[0]  # "and mister ... john dashwood had then ... leisure to consider ..."
    clip = recorded_speech(rec, 0.8)
    last = set(normalize(rec.phrases[-1]).split())
    async with twilio_caller(url(server)) as caller:
        conn = await started(server, caller)
        caller.say(clip.samples)
        session = conn.session
        assert session is not None

        def answered() -> bool:
            done = [r for r in session.ledger.records if r.assistant_text]
            return bool(done) and bool(last & set(normalize(done[-1].user_text).split()))

        await until(answered, 120)
        said = " ".join(r.user_text for r in session.ledger.records)
        print(f"twilio, a person with pauses: {[r.user_text for r in session.ledger.records]}")
        assert word_error_rate(" ".join(rec.phrases), said.replace("Mr.", "mister")) <= NARROWBAND_WER, said
        for phrase in rec.phrases:
            assert set(normalize(phrase).split()) & set(normalize(said).split()), (phrase, said)
        assert not session.ledger.records[-1].interrupted


# ------------------------------------------------------------ bad input


async def test_bad_token_closes_with_a_reason(server: VoiceServer) -> None:
    async with twilio_caller(url(server)) as caller:
        await caller.start("wrong")
        assert await caller.wait_closed() == (1008, "bad or missing token")
    async with twilio_caller(url(server)) as caller:
        await caller.start(None)
        assert await caller.wait_closed() == (1008, "bad or missing token")


async def test_bad_messages_are_logged_and_other_calls_are_unaffected(server: VoiceServer) -> None:
    async with twilio_caller(url(server)) as good, twilio_caller(url(server)) as bad:
        good.stream_sid = "MZgood"
        good_conn = await started(server, good)
        media = bad.media(b"\xff" * 160)
        await bad.send("{not json")
        await bad.send("[1, 2]")
        await bad.send({"event": "dance"})
        await bad.send({**media, "streamSid": bad.stream_sid})  # media before start
        await bad.send(b"\x00\x01")  # binary: Media Streams is text only
        bad_conn = await started(server, bad)
        await bad.send({**media, "streamSid": "MZother"})  # wrong streamSid
        await bad.send({**media, "media": {"payload": "!!not base64!!"}})
        await bad.send({**media, "media": {"payload": "A" * 20000}})  # over one second of audio
        await bad.send({"event": "mark", "streamSid": bad.stream_sid, "mark": {"name": "never-sent"}})
        await bad.send(
            {"event": "dtmf", "streamSid": bad.stream_sid, "dtmf": {"track": "inbound_track", "digit": "5"}}
        )
        await bad.send({"event": "start", "start": {}, "streamSid": bad.stream_sid})  # a second start
        await until(lambda: bad_conn.errors >= 9, 10)  # all but the mark and the dtmf
        assert not bad.closed and not good.closed
        # an oversized message closes only that call (websockets' limit: 1009)
        async with twilio_caller(url(server)) as huge:
            await huge.send("x" * (server.max_message_bytes + 1))
            code, _ = await huge.wait_closed()
            assert code == 1009
        await bad.stop()
        assert await bad.wait_closed() == (1000, "call ended")
        assert not good.closed
        await good.stop()
        assert await good.wait_closed() == (1000, "call ended")
    assert good_conn.session is not None and good_conn.session.unfinished_tasks() == 0


async def test_a_dropped_socket_ends_the_session(server: VoiceServer) -> None:
    async with twilio_caller(url(server)) as caller:
        conn = await started(server, caller)
        caller.say(espeak(QUESTION))
        await caller.wait_until(lambda: len(caller.of("media")) >= 10, 120)  # mid-reply
        caller.ws.transport.abort()  # no close handshake: the network dropped
    await until(lambda: conn not in server.connections, 30)
    assert conn.session is not None and conn.session.unfinished_tasks() == 0
    assert conn.transport is not None and conn.transport.closed
