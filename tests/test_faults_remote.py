"""The remote LLM failing, with a real vLLM OpenAI server behind a fault-injecting proxy.

:class:`faultproxy.FaultProxy` sits between :class:`llm.remote.RemoteVLLM` and the
real server (the ``vllm_server_url`` fixture) and refuses, drops mid-stream or stalls.
First the client alone (each fault's error, the server aborting the request, the
backoff); then a real voice session over the WebSocket server (real VAD, ASR and TTS,
a question spoken by espeak-ng): the apology is heard, ``turn.failed`` arrives, the
session stays up, ``/healthz`` says degraded, and once the proxy heals the next
question gets a real answer and ``/healthz`` says ok again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
from faultproxy import FaultProxy
from procs import SERVED_MODEL_NAME, free_port
from speech import espeak, normalize
from test_llm_remote import QUESTION, STORY, running_on_server
from wsclient import VoiceClient, voice_client

from asr.base import ASREngine
from llm.base import ChatMessage
from llm.remote import RemoteVLLM
from tts.base import TTS
from vad.base import VAD
from voice_pipeline.audio import to_float32
from voice_pipeline.config import Config, LLMConfig
from voice_pipeline.engines import Engines
from voice_pipeline.errors import EngineError
from voice_pipeline.server.app import VoiceServer

TIMEOUT_S = 3.0  # request_timeout_s: how long a stall lasts before the turn gives up
RETRY_S = 0.5


def remote_config(url: str, **changes: Any) -> LLMConfig:
    settings: dict[str, Any] = {
        "engine": "remote",
        "url": url,
        "remote_model": SERVED_MODEL_NAME,
        "request_timeout_s": TIMEOUT_S,
        "retry_initial_s": RETRY_S,
        "retry_max_s": 2 * RETRY_S,
        **changes,
    }
    return LLMConfig(**settings)


async def collect(llm: RemoteVLLM, messages: list[ChatMessage], request_id: str) -> str:
    return "".join([d.text async for d in llm.stream(messages, request_id)])


async def until_retry_allowed(llm: RemoteVLLM) -> None:
    """Sleep out the client's backoff (it says how long it is)."""
    await asyncio.sleep(llm.health().retry_in_s)


async def until_server_idle(base_url: str) -> float:
    """``vllm:num_requests_running`` once it reaches 0 (the gauge moves with engine steps)."""
    running = await running_on_server(base_url)
    for _ in range(100):
        if running == 0:
            break
        await asyncio.sleep(0.1)
        running = await running_on_server(base_url)
    return running


# ---------------------------------------------------------------- no server needed


async def test_while_backing_off_a_request_fails_fast_without_a_connection() -> None:
    # upstream: a free port nobody listens on; the proxy accepts, then hangs up
    proxy = FaultProxy(f"http://127.0.0.1:{free_port()}/v1")
    await proxy.start()
    llm = RemoteVLLM(remote_config(proxy.url, retry_initial_s=60.0, retry_max_s=60.0))
    try:
        with pytest.raises(EngineError) as first:
            await collect(llm, QUESTION, "first")
        assert first.value.retryable
        assert proxy.accepted == 2  # hung up on before an answer: asked once more, then failed
        health = llm.health()
        assert not health.ok and health.failures == 1 and 0 < health.retry_in_s <= 60
        assert health.reason == str(first.value)
        with pytest.raises(EngineError, match="next try in") as second:
            await collect(llm, QUESTION, "second")
        assert second.value.retryable
        assert proxy.accepted == 2  # refused without touching the network
        assert llm.health().failures == 1  # a refusal during the backoff is not a new failure
        assert llm.unfinished_requests() == 0
    finally:
        await llm.aclose()
        await proxy.aclose()


# ---------------------------------------------------------------- the client against the real server


@pytest.fixture
async def proxy(vllm_server_url: str) -> AsyncIterator[FaultProxy]:
    fault_proxy = FaultProxy(vllm_server_url)
    await fault_proxy.start()
    yield fault_proxy
    await fault_proxy.aclose()


@pytest.mark.real_models
@pytest.mark.parametrize("fault", ["refuse", "drop", "stall"])
async def test_each_fault_is_a_retryable_error_and_the_client_recovers(
    proxy: FaultProxy, vllm_server_url: str, fault: str
) -> None:
    llm = RemoteVLLM(remote_config(proxy.url))
    try:
        assert "Paris" in await collect(llm, QUESTION, "before")  # a pooled keep-alive connection now
        assert llm.health().ok
        match fault:
            case "refuse":
                await proxy.refuse()
            case "drop":
                proxy.drop_after(600)  # the headers and the first few events, then the cut
            case "stall":
                proxy.stall()
        started = time.monotonic()
        with pytest.raises(EngineError) as info:
            await collect(llm, STORY, f"{fault}-1")
        took_s = time.monotonic() - started
        print(f"\n{fault}: failed after {took_s:.2f} s (request_timeout_s {TIMEOUT_S}): {info.value}")
        assert info.value.retryable
        expected = {"refuse": "cannot connect", "drop": "stream", "stall": f"no data for {TIMEOUT_S} s"}
        assert expected[fault] in str(info.value)
        assert not llm.health().ok
        assert llm.unfinished_requests() == 0
        if fault != "refuse":  # the server saw its client go away and aborted the request
            await proxy.heal()  # (a stall's held bytes flow on; the server sees the close)
            assert await until_server_idle(vllm_server_url) == 0
        await proxy.heal()
        await until_retry_allowed(llm)
        assert "Paris" in await collect(llm, QUESTION, "after")
        assert llm.health().ok
    finally:
        await llm.aclose()


@pytest.mark.real_models
async def test_a_request_the_server_hangs_up_on_before_answering_is_sent_once_more(proxy: FaultProxy) -> None:
    llm = RemoteVLLM(remote_config(proxy.url))
    try:
        assert "Paris" in await collect(llm, QUESTION, "before")  # a pooled keep-alive connection now
        proxy.hang_up(1)  # as a server closing that connection just as the next request goes out
        assert "Paris" in await collect(llm, QUESTION, "hung-up-once")
        assert proxy.hung_up == 1 and llm.health().ok
        proxy.hang_up(2)  # twice in a row: a real failure, said as one
        with pytest.raises(EngineError) as info:
            await collect(llm, QUESTION, "hung-up-twice")
        assert info.value.retryable and "stream broke" in str(info.value)
        assert proxy.hung_up == 3 and llm.health().failures == 1
        assert llm.unfinished_requests() == 0
        await until_retry_allowed(llm)
        assert "Paris" in await collect(llm, QUESTION, "after")
    finally:
        await llm.aclose()


# ---------------------------------------------------------------- a voice session


@dataclasses.dataclass
class Rig:
    server: VoiceServer
    proxy: FaultProxy
    llm: RemoteVLLM
    whisper: ASREngine


@pytest.fixture(scope="module")
async def rig(
    vllm_server_url: str, config: Config, silero16: VAD, whisper: ASREngine, piper: TTS
) -> AsyncIterator[Rig]:
    proxy = FaultProxy(vllm_server_url)
    await proxy.start()
    llm_cfg = remote_config(proxy.url)
    cfg = dataclasses.replace(
        config,
        llm=llm_cfg,
        server=dataclasses.replace(config.server, port=0, max_sessions=4),
    )
    llm = RemoteVLLM(cfg.llm)
    srv = VoiceServer(Engines(vad=silero16, asr=whisper, llm=llm, tts=piper), cfg)
    await srv.start()
    try:
        yield Rig(srv, proxy, llm, whisper)
    finally:
        await srv.aclose()
        await llm.aclose()
        await proxy.aclose()


async def healthz(srv: VoiceServer) -> tuple[int, dict[str, Any]]:
    async with httpx.AsyncClient() as client:
        answer = await client.get(f"{srv.url}healthz")
    return answer.status_code, answer.json()


async def ask(client: VoiceClient, text: str) -> dict[str, Any]:
    """Speak ``text``; return the turn's ``turn.latency`` message."""
    done = len(client.of("turn.latency"))
    client.say(espeak(text))
    await client.wait_until(lambda: len(client.of("turn.latency")) > done, 120)
    return client.of("turn.latency")[done]


def reply_audio(client: VoiceClient, turn_id: int) -> np.ndarray:
    parts = [f.pcm for f in client.audio if f.header["turn_id"] == turn_id]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


@pytest.mark.real_models
@pytest.mark.parametrize("fault", ["refuse", "drop", "stall"])
async def test_the_session_apologizes_stays_up_and_recovers(rig: Rig, fault: str) -> None:
    question = "What is the capital of France?"
    async with voice_client(f"ws://127.0.0.1:{rig.server.port}/ws") as client:
        await client.start(output_sample_rate=16000)
        client.start_microphone()
        match fault:
            case "refuse":
                await rig.proxy.refuse()
            case "drop":
                rig.proxy.drop_after(600)
            case "stall":
                rig.proxy.stall()
        failed_turn = await ask(client, question)
        turn = failed_turn["turn_id"]
        failures = [m for m in client.of("turn.failed") if m["turn_id"] == turn]
        assert [(m["stage"], m["retryable"]) for m in failures] == [("llm", True)]
        record = failed_turn["record"]
        assert record["failed"] == "llm"
        assert "apology_sent" in record["marks"]
        heard = rig.whisper.transcribe(to_float32(reply_audio(client, turn))).text
        print(f"\n{fault}: turn.failed {failures[0]['message']!r}; the listener heard {heard!r}")
        marks = record["marks"]
        print(f"{fault}: endpoint -> apology sent {marks['apology_sent'] - marks['endpoint']:.0f} ms")
        assert "sorry" in normalize(heard).split()

        status, health = await healthz(rig.server)
        assert status == 200 and health["status"] == "degraded"
        assert health["reason"].startswith("llm: ") and not health["llm"]["ok"]
        assert not client.closed  # the session stayed up

        await rig.proxy.heal()
        await until_retry_allowed(rig.llm)
        answered = await ask(client, question)
        assert not [m for m in client.of("turn.failed") if m["turn_id"] == answered["turn_id"]]
        assert "paris" in normalize(answered["record"]["assistant_text"]).split()
        assert answered["record"]["failed"] is None
        status, health = await healthz(rig.server)
        assert status == 200 and health["status"] == "ok" and health["llm"]["ok"]
        assert "reason" not in health
    with contextlib.suppress(Exception):
        await rig.proxy.heal()
