"""Faults around a voice session, with the real models over the WebSocket server:

* an exception in one session's ASR, LLM or TTS leaves another session untouched;
* a client that disconnects mid-reply leaves no task and no vLLM request behind
  (in-process engine, and the remote engine against a real vLLM server);
* a half-open connection (no pongs) is closed by the keepalive with 1011;
* a client that stops reading is dropped with 1008 while the server's queue stays bounded;
* the filler is spoken when the reply is late, and the ledger keeps them apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import numpy as np
import pytest
import servers
from polling import until
from procs import SERVED_MODEL_NAME
from servers import ws_url
from speech import concat, espeak, normalize, silence
from test_llm_remote import running_on_server
from wsclient import VoiceClient, voice_client

from asr.base import ASREngine, MoreAudio, Transcription
from llm.base import LLM, ChatMessage, LLMDelta, LLMHealth
from llm.remote import RemoteVLLM
from tts.base import TTS
from voice_pipeline.audio import resample, to_float32
from voice_pipeline.config import Config, LLMConfig
from voice_pipeline.engines import Engines
from voice_pipeline.runner import run_audio
from voice_pipeline.server.app import VoiceServer
from voice_pipeline.server.connection import VoiceConnection

pytestmark = pytest.mark.real_models

QUESTION = "What is the capital of France?"
STORY = "Tell me a long story about a brave knight and a dragon."
TRIGGER = ("dragon", "knight")  # the failing session talks about these; the other does not


def running_server(
    engines: Engines, config: Config, **server: Any
) -> AbstractAsyncContextManager[VoiceServer]:
    return servers.running_server(engines, config, **{"max_sessions": 4, **server})


def triggered(text: str) -> bool:
    return any(word in normalize(text).split() for word in TRIGGER)


async def latency(client: VoiceClient, n: int = 1, timeout_s: float = 180.0) -> dict[str, Any]:
    await client.wait_until(lambda: len(client.of("turn.latency")) >= n, timeout_s)
    return client.of("turn.latency")[n - 1]


# ---------------------------------------------------------------- isolation


class RaisingASR:
    """The real ASR, raising (a plain exception, not an EngineError) when it hears a trigger."""

    def __init__(self, inner: ASREngine) -> None:
        self._inner = inner
        self.sample_rate_hz = inner.sample_rate_hz
        self.raised = 0

    def transcribe(self, audio: Any, *, more: MoreAudio | None = None) -> Transcription:
        result = self._inner.transcribe(audio, more=more)
        if triggered(result.text):
            self.raised += 1
            raise RuntimeError("the ASR wrapper broke on purpose")
        return result

    def transcribe_partial(self, audio: Any) -> Transcription | None:
        return self._inner.transcribe_partial(audio)  # partials are previews: never the trigger

    def close(self) -> None:
        pass


class RaisingTTS:
    def __init__(self, inner: TTS) -> None:
        self._inner = inner
        self.sample_rate_hz, self.voice = inner.sample_rate_hz, inner.voice
        self.raised = 0

    def synthesize(self, text: str) -> Any:
        if triggered(text):
            self.raised += 1
            raise RuntimeError("the TTS wrapper broke on purpose")
        return self._inner.synthesize(text)

    def close(self) -> None:
        pass


class RaisingLLM:
    def __init__(self, inner: LLM) -> None:
        self._inner = inner
        self.raised = 0

    async def stream(
        self, messages: Sequence[ChatMessage], request_id: str
    ) -> AsyncGenerator[LLMDelta, None]:
        if triggered(messages[-1].content):
            self.raised += 1
            raise RuntimeError("the LLM wrapper broke on purpose")
        stream = self._inner.stream(messages, request_id)
        async with contextlib.aclosing(stream):
            async for delta in stream:
                yield delta

    async def abort(self, request_id: str) -> None:
        await self._inner.abort(request_id)

    def unfinished_requests(self) -> int:
        return self._inner.unfinished_requests()

    def health(self) -> LLMHealth:
        return self._inner.health()

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("stage", ["asr", "llm", "tts"])
async def test_an_exception_in_one_session_leaves_the_other_alone(
    engines: Engines, config: Config, stage: str
) -> None:
    wrapped = dataclasses.replace(engines)
    wrapper: RaisingASR | RaisingLLM | RaisingTTS
    match stage:
        case "asr":
            wrapped.asr = wrapper = RaisingASR(engines.asr)
        case "llm":
            wrapped.llm = wrapper = RaisingLLM(engines.llm)
        case "tts":
            wrapped.tts = wrapper = RaisingTTS(engines.tts)
    async with (
        running_server(wrapped, config) as srv,
        voice_client(ws_url(srv)) as failing,
        voice_client(ws_url(srv)) as healthy,
    ):
        for client in (failing, healthy):
            await client.start(output_sample_rate=16000)
            client.start_microphone()
        failing.say(espeak(STORY))
        healthy.say(concat(silence(0.5), espeak(QUESTION)))
        bad, good = await asyncio.gather(latency(failing), latency(healthy))

        assert wrapper.raised > 0
        failed = failing.of("turn.failed")
        assert [(m["stage"], m["retryable"]) for m in failed] == [(stage, False)]
        assert failed[0]["message"] == f"internal error in {stage}: RuntimeError"
        assert bad["record"]["failed"] == stage
        assert not failing.closed  # the failing session stays up too

        assert healthy.of("turn.failed") == []
        assert good["record"]["failed"] is None
        assert "paris" in normalize(good["record"]["assistant_text"]).split()
        assert good["record"]["work"]["audio_synthesized_s"] > 0
        assert not healthy.closed
    assert engines.llm.unfinished_requests() == 0


# ---------------------------------------------------------------- disconnects


async def disconnect_mid_reply(srv: VoiceServer) -> tuple[VoiceConnection, float]:
    """Ask for a story, drop the TCP connection once reply audio arrives; return the
    server-side connection and the seconds until the server had closed its session."""
    async with voice_client(ws_url(srv)) as client:
        await client.start(output_sample_rate=16000)
        client.start_microphone()
        client.say(espeak(STORY))
        await client.wait_for(lambda m: m["type"] == "assistant.audio", 180)
        (conn,) = srv.connections
        assert isinstance(conn, VoiceConnection) and conn.session is not None
        assert conn.session.unfinished_tasks() > 0  # mid-reply
        client.ws.transport.abort()  # no close frame: the client just goes away
        started = time.monotonic()
        await until(lambda: not srv.connections, 60)
        return conn, time.monotonic() - started


async def test_a_disconnect_mid_reply_ends_its_tasks_and_aborts_the_in_process_request(
    engines: Engines, config: Config
) -> None:
    before = set(asyncio.all_tasks())
    async with running_server(engines, config) as srv:
        conn, took_s = await disconnect_mid_reply(srv)
        assert conn.session is not None
        assert conn.session.unfinished_tasks() == 0
        assert engines.llm.unfinished_requests() == 0  # aborted in vLLM at once
        print(f"\nin-process vLLM: session closed {1000 * took_s:.0f} ms after the client vanished")
        leftover = [t.get_name() for t in asyncio.all_tasks() - before if not t.done()]
        assert not [n for n in leftover if n.startswith(("reply-", "partials-", "prefetch-", "ws-writer"))]


async def test_a_disconnect_mid_reply_aborts_the_remote_request(
    engines: Engines, config: Config, vllm_server_url: str
) -> None:
    llm_cfg = LLMConfig(engine="remote", url=vllm_server_url, remote_model=SERVED_MODEL_NAME)
    remote = RemoteVLLM(llm_cfg)
    cfg = dataclasses.replace(config, llm=llm_cfg)
    try:
        async with running_server(dataclasses.replace(engines, llm=remote), cfg) as srv:
            conn, took_s = await disconnect_mid_reply(srv)
            assert conn.session is not None and conn.session.unfinished_tasks() == 0
            assert remote.unfinished_requests() == 0
            running = await running_on_server(vllm_server_url)
            for _ in range(100):  # the gauge moves with the server's engine steps
                if running == 0:
                    break
                await asyncio.sleep(0.1)
                running = await running_on_server(vllm_server_url)
            print(f"\nremote vLLM: session closed {1000 * took_s:.0f} ms after the client vanished")
            assert running == 0, "the server kept generating for a client that is gone"
    finally:
        await remote.aclose()


async def test_a_half_open_connection_is_closed_by_the_ping_timeout(engines: Engines, config: Config) -> None:
    async with (
        running_server(engines, config, ping_interval_s=0.3, ping_timeout_s=0.3) as srv,
        voice_client(ws_url(srv)) as client,
    ):
        await client.start(output_sample_rate=16000)
        client.ws.transport.pause_reading()  # like a peer that vanished: no pong ever comes
        started = time.monotonic()
        await until(lambda: not srv.connections, 30)
        took_ms = 1000 * (time.monotonic() - started)
        print(f"\nhalf-open connection closed {took_ms:.0f} ms after the client stopped answering")
        client.ws.transport.resume_reading()  # to read the server's close frame
        code, reason = await client.wait_closed()
    assert (code, reason) == (1011, "keepalive ping timeout")


async def test_a_client_that_stops_reading_is_dropped_and_the_queue_stays_bounded(
    engines: Engines, config: Config
) -> None:
    out_rate = 16000
    async with (
        running_server(engines, config, max_queued_events=16, max_queued_audio_s=1.0) as srv,
        voice_client(ws_url(srv), ping_interval=None) as client,  # its own keepalive would fail
    ):
        # a small receive window, so that TCP fills up quickly once the client stops reading
        client.ws.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        await client.start(output_sample_rate=out_rate)
        client.start_microphone()
        client.say(espeak(STORY))
        await client.wait_for(lambda m: m["type"] == "assistant.text", 180)
        client.ws.transport.pause_reading()  # the client stops reading
        paused_at = time.monotonic()
        (conn,) = srv.connections
        assert isinstance(conn, VoiceConnection)
        out, server_side = conn.outbound, conn._ws.transport
        peak_bytes = peak_audio = peak_events = peak_buffer = 0
        async with asyncio.timeout(120):
            while not out.overflowed and srv.connections:
                peak_bytes = max(peak_bytes, out.queued_bytes)
                peak_audio = max(peak_audio, out.audio_queued)
                peak_events = max(peak_events, out.events_queued)
                peak_buffer = max(peak_buffer, server_side.get_write_buffer_size())
                await asyncio.sleep(0.005)
        print(
            f"\nnot reading: peak queue {peak_bytes} bytes ({peak_audio / out_rate:.2f} s of audio, "
            f"{peak_events} events), peak websockets write buffer {peak_buffer} bytes; "
            f"overflowed={out.overflowed}"
        )
        assert out.overflowed
        assert out.queued_bytes == 0  # dropped, not kept
        assert peak_events <= 16
        # audio waits for room: at most the limit plus the clause that was let in
        assert peak_audio <= out_rate * (1.0 + 10.0)
        assert peak_buffer <= 32 * 1024 + 2 * out_rate * 10  # write_limit + one clause's frame
        # the server sent its close frame (1008); a client that does not read never sees it
        # behind the unread data, so the server drops the TCP connection after websockets'
        # close_timeout. The close is its own task, started when the queue overflowed: it runs
        # once the cancelled writer has let go of the socket, so wait for it
        await until(lambda: conn._ws.protocol.close_sent is not None, 30)
        close = conn._ws.protocol.close_sent
        assert close is not None and close.code == 1008 and "not reading" in close.reason
        await until(lambda: not srv.connections, 60)
        assert conn.session is not None and conn.session.unfinished_tasks() == 0
        print(f"dropped {time.monotonic() - paused_at:.1f} s after the client stopped reading")
    assert engines.llm.unfinished_requests() == 0


# ---------------------------------------------------------------- filler


async def test_the_filler_is_spoken_first_and_the_ledger_keeps_the_reply_apart(
    engines: Engines, config: Config, whisper: ASREngine
) -> None:
    # the reply computed after the end of turn (no speculative reply ready at once): its
    # first clause is late by construction, 50 ms after the end of speech
    dialogue = dataclasses.replace(config.dialogue, filler_after_ms=50, speculative_start=False)
    cfg = dataclasses.replace(config, dialogue=dialogue)
    audio = concat(silence(0.5), espeak(QUESTION), silence(6.0))
    result = await asyncio.wait_for(run_audio(engines, cfg, audio, 16000), timeout=120)
    (record,) = result.records
    assert record.filler_ms is not None and record.filler_ms >= 50
    assert record.marks_ns["filler_sent"] < record.marks_ns["first_audio_sent"]
    assert record.stages_ms["voice_to_voice"] > record.filler_ms
    print(
        f"\nfiller after {record.filler_ms:.0f} ms; the reply's own first audio at "
        f"{record.stages_ms['voice_to_voice']:.0f} ms (voice_to_voice)"
    )
    assert "paris" in normalize(record.assistant_text).split()
    assert "think" not in normalize(record.heard_text).split()
    assert all("think" not in m.content for m in result.history)
    out = result.output[np.flatnonzero(result.output)[0] :]
    heard = whisper.transcribe(resample(to_float32(out), result.output_rate_hz, 16000)).text
    words = normalize(heard).split()
    print(f"the listener heard {heard!r}")
    # the filler came first and the reply after it; Whisper tiny may slip on one of the
    # filler's words ("let me thank"), so two of its three words are enough to know it
    filler = normalize(cfg.dialogue.filler_text).split()[-3:]
    assert sum(w in words[:6] for w in filler) >= 2, (filler, words)
    assert "paris" in words[words.index(next(w for w in words[:6] if w in filler)) + 1 :]
