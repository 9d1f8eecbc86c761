"""/v1/realtime on a running server, over real sockets, the openai SDK as the client (fake
engines: the rules and the protocol, fast). The real models: tests/test_e2e_realtime.py.

The server's rules hold as on /ws: the bearer token (the SDK's api_key), the session
limit (shared with /ws), the per-address rate limit, the Origin rule, the size limits;
/metrics counts realtime sessions and turns; every malformed event gets an error and
the session goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from fakes import Fakes, silence, tone
from rtclient import RealtimeClient, b64, pcm16, realtime
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from wsclient import voice_client

from voice_pipeline.config import Config, load_config
from voice_pipeline.edge import SessionScope
from voice_pipeline.errors import ClosedError
from voice_pipeline.ledger.ledger import path_of
from voice_pipeline.realtime.connection import RealtimeConnection
from voice_pipeline.server.app import VoiceServer

REPLY = "The answer is forty two. That is all I know."
TOKEN = "rt-token-3c1f"


@contextlib.asynccontextmanager
async def server(**settings: Any) -> AsyncIterator[tuple[VoiceServer, Fakes]]:
    base = load_config(None)
    cfg: Config = dataclasses.replace(
        base, server=dataclasses.replace(base.server, **{"port": 0, **settings})
    )
    fakes = Fakes()
    fakes.asr.text = "what is the answer"
    fakes.llm.reply = REPLY
    srv = VoiceServer(fakes.engines(), cfg)
    await srv.start()
    try:
        yield srv, fakes
    finally:
        fakes.llm.release()
        await srv.aclose()


def get(address: str) -> str:
    with urllib.request.urlopen(address, timeout=10) as r:
        return str(r.read().decode())


def url(srv: VoiceServer, query: str = "?model=m") -> str:
    return f"ws://127.0.0.1:{srv.port}/v1/realtime{query}"


async def raw_events(ws: Any, n: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    out = []
    async with asyncio.timeout(timeout_s):
        while len(out) < n:
            out.append(json.loads(await ws.recv()))
    return out


async def ask(rt: RealtimeClient, text: str, **response: Any) -> Any:
    """A typed question and its response; returns response.done."""
    since = len(rt.events)
    await rt.send(
        {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        }
    )
    await rt.send({"type": "response.create", **({"response": response} if response else {})})
    return await rt.wait_type("response.done", since=since)


async def test_the_sdk_holds_a_session_typed_and_spoken() -> None:
    async with server() as (srv, fakes), realtime(srv) as rt:
        created = await rt.wait_type("session.created")
        assert created.session.model == "SmolLM2-135M-Instruct"
        await rt.send(
            {"type": "session.update", "session": {"type": "realtime", "instructions": "Be brief."}}
        )
        assert (await rt.wait_type("session.updated")).session.instructions == "Be brief."
        done = await ask(rt, "Hello?")
        assert done.response.status == "completed"
        assert done.response.output[0].content[0].transcript == REPLY
        assert fakes.llm.requests[-1].messages[0].content == "Be brief."
        assert rt.of("response.output_audio.delta")
        await rt.wait_type("voice_pipeline.turn.latency")
        # spoken, with the server's VAD (the fake VAD hears a tone)
        since = len(rt.events)
        await rt.stream(pcm16(silence(0.3, 24000)) + pcm16(tone(0.6, 24000)) + pcm16(silence(1.0, 24000)))
        heard = await rt.wait_type("conversation.item.input_audio_transcription.completed", since=since)
        assert heard.transcript == "what is the answer"
        assert (await rt.wait_type("response.done", since=since)).response.status == "completed"


async def test_a_session_s_tools_reach_the_llm_with_the_default_model() -> None:
    clock = {"type": "function", "name": "clock", "description": "the time", "parameters": {"type": "object"}}
    async with server() as (srv, fakes), realtime(srv) as rt:
        await rt.wait_type("session.created")
        since = len(rt.events)
        named = {"type": "function", "name": "clock"}
        session = {"type": "realtime", "tools": [clock], "tool_choice": named}
        await rt.send({"type": "session.update", "session": session})
        assert (await rt.wait_type("session.updated", since=since)).session.tools[0].name == "clock"
        await ask(rt, "What time is it?")  # the fake LLM answers in words all the same
        offer = fakes.llm.requests[-1].tools
        assert offer is not None and offer.function == "clock" and offer.tools[0].name == "clock"
        await ask(rt, "And now?", tool_choice="none")
        assert fakes.llm.requests[-1].tools is None
        # a spoken turn: its reply is offered the tools too (no prefetch without them)
        before = len(fakes.llm.requests)
        since = len(rt.events)
        await rt.stream(pcm16(silence(0.3, 24000)) + pcm16(tone(0.6, 24000)) + pcm16(silence(1.0, 24000)))
        assert (await rt.wait_type("response.done", since=since)).response.status == "completed"
        asked = fakes.llm.requests[before:]
        assert asked and all(r.tools == offer for r in asked), asked
        since = len(rt.events)
        await rt.send({"type": "session.update", "session": {"type": "realtime", "tool_choice": "auto"}})
        error = await rt.wait_type("error", since=since)
        assert error.error.code == "tools_unsupported"  # SmolLM2 cannot choose calls by itself


MANUAL_TURNS = {
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}


async def test_a_response_asked_for_as_the_input_is_committed_reads_its_words() -> None:
    """Push-to-talk as OpenAI documents it: commit, then response.create at once. The words
    come a moment later (the ASR takes 0.5 s here): the response waits for them, rather than
    answering without the question (before, the LLM was sent the instructions alone)."""
    async with server() as (srv, fakes), realtime(srv) as rt:
        fakes.asr.delay_s = 0.5
        await rt.wait_type("session.created")
        await rt.send(MANUAL_TURNS)
        await rt.wait_type("session.updated")
        await rt.stream(pcm16(tone(0.6, 24000)) + pcm16(silence(0.3, 24000)), paced=False)
        await rt.send({"type": "input_audio_buffer.commit"})
        await rt.send({"type": "response.create"})
        created = await rt.wait_type("response.created")
        assert not rt.of("conversation.item.input_audio_transcription.completed")  # asked before the words
        done = await rt.wait_type("response.done")
        assert done.response.status == "completed"
        (request,) = fakes.llm.requests
        assert [(m.role, m.content) for m in request.messages[1:]] == [("user", "what is the answer")]
        record = await rt.wait_for(
            lambda e: e.type == "voice_pipeline.turn.latency" and e.response_id == created.response.id
        )
        assert record.record["user_text"] == "what is the answer"
        # the record starts at the ask, and its first stage is the wait for the words
        stages, marks = record.record["stages_ms"], record.record["marks"]
        assert stages["asr_final"] >= 400 and "voice_to_voice" not in stages
        assert sum(stages[s.name] for s in path_of(marks)) == pytest.approx(stages["asked_to_audio"], abs=0.5)


async def test_a_response_asked_for_with_an_audio_item_reads_its_words_or_goes_on_without() -> None:
    """An audio item the client creates is transcribed, and a response asked for at once reads
    its words; if the ASR fails, the response goes on without them (it does not wait for ever)."""
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_audio", "audio": b64(pcm16(tone(0.6, 24000)))}],
    }
    async with server() as (srv, fakes), realtime(srv) as rt:
        fakes.asr.delay_s = 0.5
        await rt.wait_type("session.created")
        await rt.send({"type": "conversation.item.create", "item": item})
        await rt.send({"type": "response.create"})
        first = await rt.wait_type("response.done")
        assert fakes.llm.requests[-1].messages[-1].content == "what is the answer"
        fakes.asr.error = RuntimeError("the ASR is down")
        since = len(rt.events)
        await rt.send({"type": "conversation.item.create", "item": item})
        await rt.send({"type": "response.create"})
        await rt.wait_type("conversation.item.input_audio_transcription.failed", since=since)
        done = await rt.wait_for(lambda e: e.type == "response.done" and e.response.id != first.response.id)
        assert done.response.status == "completed" and len(fakes.llm.requests) == 2


async def test_the_token_is_the_sdks_api_key() -> None:
    async with server(auth_token=TOKEN) as (srv, _):
        with pytest.raises(InvalidStatus) as info:
            async with realtime(srv, api_key="wrong"):
                pass
        assert info.value.response.status_code == 401
        async with realtime(srv, api_key=TOKEN) as rt:
            await rt.wait_type("session.created")
        async with connect(url(srv, f"?model=m&token={TOKEN}")) as ws:  # browsers: the query
            assert (await raw_events(ws, 1))[0]["type"] == "session.created"


async def test_the_session_limit_is_shared_with_ws_and_says_why() -> None:
    async with server(max_sessions=1) as (srv, _):
        async with voice_client(f"ws://127.0.0.1:{srv.port}/ws") as phone:
            await phone.start()
            async with connect(url(srv)) as ws:
                (error,) = await raw_events(ws, 1)
                assert error["type"] == "error" and error["error"]["code"] == "session_limit_reached"
                with pytest.raises(ConnectionClosed):
                    await ws.recv()
                assert ws.close_code == 1013
        assert srv.metrics.sessions_refused == {"limit": 1}


async def test_the_rate_limit_and_the_origin_rule() -> None:
    async with server(max_new_sessions_per_ip_per_min=1) as (srv, _):
        async with connect(url(srv), additional_headers={"Origin": "https://evil.example"}) as ws:
            (error,) = await raw_events(ws, 1)
            assert error["error"]["code"] == "connection_refused"
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert ws.close_code == 1008
        with pytest.raises(InvalidStatus) as info:
            async with connect(url(srv)):
                pass
        assert info.value.response.status_code == 429


async def test_size_limits() -> None:
    async with server(max_realtime_event_bytes=4096) as (srv, _), connect(url(srv)) as ws:
        await raw_events(ws, 1)
        big = json.dumps({"type": "input_audio_buffer.append", "audio": b64(b"\x00" * 6000)})
        await ws.send(big)
        (error,) = await raw_events(ws, 1)
        assert error["error"]["code"] == "event_too_large"
        await ws.send(json.dumps({"type": "input_audio_buffer.clear", "event_id": "e1"}))
        assert (await raw_events(ws, 1))[0]["type"] == "input_audio_buffer.cleared"  # it went on
        assert srv.max_realtime_message_bytes == 4 * 4096
        await ws.send("x" * (4 * 4096 + 1))
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1009


BAD: list[tuple[str | bytes, str]] = [
    ("not json", "invalid_json"),
    ("[1, 2]", "invalid_event"),
    (b"\xff\xfe", "invalid_json"),
    ('{"type": "session.delete", "event_id": "e"}', "unknown_event_type"),
    ('{"event_id": "e"}', "missing_required_parameter"),
    ('{"type": "input_audio_buffer.append", "audio": "***", "event_id": "e"}', "invalid_base64"),
    ('{"type": "session.update", "session": {"type": "realtime", "modalities": ["audio"]}, "event_id": "e"}',
     "unknown_parameter"),
    ('{"type": "session.update", "session": {"type": "realtime", "audio": {"output": '
     '{"format": {"type": "audio/opus"}}}}, "event_id": "e"}', "invalid_value"),
    ('{"type": "session.update", "session": {"type": "realtime", "tools": [{"type": "function", '
     '"name": "clock"}]}, "event_id": "e"}', "tools_unsupported"),
    ('{"type": "session.update", "session": {"type": "realtime", "audio": {"output": '
     '{"speed": 1.2}}}, "event_id": "e"}', "unsupported_value"),
    ('{"type": "input_audio_buffer.commit", "event_id": "e"}', "input_audio_buffer_commit_empty"),
    ('{"type": "response.cancel", "event_id": "e"}', "response_cancel_not_active"),
    ('{"type": "conversation.item.retrieve", "item_id": "nope", "event_id": "e"}',
     "item_retrieve_invalid_item_id"),
    ('{"type": "conversation.item.truncate", "item_id": "nope", "content_index": 0, "audio_end_ms": 5,'
     ' "event_id": "e"}', "item_truncate_invalid_item_id"),
    ('{"type": "conversation.item.delete", "item_id": "nope", "event_id": "e"}',
     "item_delete_invalid_item_id"),
    ('{"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": '
     '[{"type": "input_image", "image_url": "x"}]}, "event_id": "e"}', "unsupported_value"),
    ('{"type": "response.create", "response": {"audio": {"output": {"format": {"type": "audio/pcma"}}}},'
     ' "event_id": "e"}', "unsupported_value"),
]  # fmt: skip


async def test_every_malformed_event_gets_an_error_and_the_session_goes_on() -> None:
    async with server() as (srv, _), connect(url(srv)) as ws:
        await raw_events(ws, 1)
        for frame, code in BAD:
            await ws.send(frame)
            (event,) = await raw_events(ws, 1)
            assert event["type"] == "error", (frame, event)
            assert (event["error"]["code"], event["error"]["event_id"]) == (
                code,
                "e" if "event_id" in str(frame) else None,
            ), frame
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime"}}))
        assert (await raw_events(ws, 1))[0]["type"] == "session.updated"


async def test_metrics_count_realtime_sessions_and_turns() -> None:
    async with server() as (srv, _):
        async with realtime(srv) as rt:
            await ask(rt, "Hello?")
            await rt.wait_type("voice_pipeline.turn.latency")
        text = await asyncio.to_thread(get, f"http://127.0.0.1:{srv.port}/metrics")
        assert 'voice_pipeline_endpoint_sessions_total{endpoint="realtime"} 1' in text
        assert "voice_pipeline_turns_total 1" in text


async def test_the_session_runs_on_the_shared_edge_scope() -> None:
    """/v1/realtime is on the shared edge (voice_pipeline.edge.SessionScope), like /ws: the
    scope owns the connection's session; any client event, not only audio, moves its idle
    deadline; a client that goes quiet is closed (1000, idle) a full idle_timeout_s after its
    last event, and the scope closes the session with the connection."""
    async with server(idle_timeout_s=1.0) as (srv, _):
        loop = asyncio.get_running_loop()
        async with connect(url(srv)) as ws:
            assert (await raw_events(ws, 1))[0]["type"] == "session.created"
            (conn,) = [c for c in srv.connections if isinstance(c, RealtimeConnection)]
            assert isinstance(conn.scope, SessionScope) and conn.scope.session is conn.session
            assert conn.scope.session_id == conn.session_id  # one id in the log and the protocol
            until = loop.time() + 1.5  # events past the first deadline (1 s): it moved on
            while loop.time() < until:
                await asyncio.sleep(0.1)
                await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime"}}))
                last = loop.time()
            with pytest.raises(ConnectionClosed):
                async with asyncio.timeout(30):
                    while True:
                        await ws.recv()
            closed_at = loop.time()
        assert ws.close_code == 1000 and ws.close_reason == "idle: no client event for 1 s"
        assert closed_at >= last + 1.0 - 0.05, closed_at - last
        print(f"closed as idle {closed_at - last:.3f} s after the last client event")
        async with asyncio.timeout(10):
            while srv.connections:  # noqa: ASYNC110 -- the handler returns after the close
                await asyncio.sleep(0.01)
        with pytest.raises(ClosedError):  # the scope closed the session
            await conn.session.push_audio(np.zeros(160, dtype=np.float32))
