"""Security promises of the server, end to end with the real models (SECURITY.md).

An in-process :class:`VoiceServer` on a free port per test: the ``/ws`` token
(HTTP 401 at the handshake), the per-address rate limit (HTTP 429), TLS with a
self-signed certificate made here by the openssl CLI, and the logs of a real
spoken session captured at DEBUG: no token, no audio, no transcript at INFO.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from speech import espeak, word_error_rate
from test_server_e2e import running_server
from twilioclient import twilio_caller
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from wsclient import voice_client

from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.server.app import VoiceServer

pytestmark = pytest.mark.real_models

TOKEN = "tok-5f3c9a1e-never-in-logs"
TWILIO_TOKEN = "twilio-8d2b-never-in-logs"
QUESTION = "What is the capital of France?"
START = {"type": "start", "version": 1, "sample_rate": 16000, "format": "pcm16"}


def ws_url(srv: VoiceServer, path: str = "/ws", scheme: str = "ws") -> str:
    return f"{scheme}://127.0.0.1:{srv.port}{path}"


async def handshake_status(url: str, **connect_args: Any) -> int:
    """The HTTP status a refused handshake got (101 if it was accepted)."""
    try:
        async with connect(url, open_timeout=30, **connect_args):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def _get(url: str, context: ssl.SSLContext | None) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30, context=context) as r:
        return int(r.status), bytes(r.read())


async def http_get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """GET in a thread: the server runs on this event loop."""
    return await asyncio.to_thread(_get, url, context)


async def ready_over(url: str, **connect_args: Any) -> dict[str, Any]:
    async with connect(url, open_timeout=30, **connect_args) as ws:
        await ws.send(json.dumps(START))
        msg: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 30))
        return msg


# ------------------------------------------------------------ the /ws token


async def test_ws_needs_the_token_in_the_header_or_the_query(engines: Engines, config: Config) -> None:
    async with running_server(engines, config, auth_token=TOKEN, max_sessions=4) as srv:
        url = ws_url(srv)
        assert await handshake_status(url) == 401
        assert await handshake_status(url, additional_headers={"Authorization": "Bearer wrong"}) == 401
        assert await handshake_status(url, additional_headers={"Authorization": f"Basic {TOKEN}"}) == 401
        assert await handshake_status(url + "?token=wrong") == 401
        assert await handshake_status(url + f"?token={TOKEN[:-1]}") == 401
        assert srv.metrics.sessions_refused == {"auth": 5}
        assert srv.metrics.sessions_total == 0  # refused before any session existed
        # the right token, either way, opens a session
        assert (await ready_over(url, additional_headers={"Authorization": f"Bearer {TOKEN}"}))[
            "type"
        ] == "ready"
        assert (await ready_over(url + f"?token={TOKEN}"))["type"] == "ready"
        # the Origin rule still applies to a client that has the token
        async with connect(url + f"?token={TOKEN}", origin="http://evil.example") as ws:  # type: ignore[arg-type]
            with pytest.raises(ConnectionClosed):
                await ws.recv()
        assert ws.close_code == 1008
        # the demo page and /healthz need no token (the page reads it from its own URL)
        for path in ("", "healthz"):
            assert (await http_get(srv.url + path))[0] == 200
        # /twilio takes no bearer token: with no Twilio credential configured, a server with a
        # token refuses its anonymous calls (tests/test_security_twilio.py: the signed ones)
        assert await handshake_status(ws_url(srv, "/twilio")) == 403
        assert await handshake_status(ws_url(srv, "/twilio") + f"?token={TOKEN}") == 403


# ------------------------------------------------------------ message size limits


async def test_oversized_messages_close_only_that_connection_with_1009(
    engines: Engines, config: Config
) -> None:
    async with running_server(engines, config, max_sessions=3) as srv:  # max_frame_bytes 4096
        limit = srv.max_message_bytes
        assert limit == 65536
        async with voice_client(ws_url(srv)) as bystander:
            await bystander.start()
            for big in (b"\x00" * (limit + 2), "x" * (1 << 20)):  # a binary frame, a 1 MB text frame
                async with voice_client(ws_url(srv)) as client:
                    await client.start()
                    await client.send(big)
                    assert (await client.wait_closed())[0] == 1009
            # between max_frame_bytes and the limit: an error, and the session goes on
            async with voice_client(ws_url(srv)) as client:
                await client.start()
                await client.send(b"\x00" * 8192)
                err = await client.wait_for(lambda m: m["type"] == "error")
                assert err["code"] == "frame_too_large"
                await client.send({"type": "interrupt"})
                await client.send(b"\x00" * 640)
                await asyncio.sleep(0.5)
                assert not client.closed
            assert not bystander.closed  # the others were never affected
            await bystander.send(b"\x00" * 640)


# ------------------------------------------------------------ the rate limit


async def test_new_sessions_per_address_are_rate_limited(engines: Engines, config: Config) -> None:
    async with running_server(engines, config, max_new_sessions_per_ip_per_min=3, max_sessions=4) as srv:
        assert [await handshake_status(ws_url(srv)) for _ in range(2)] == [101, 101]
        assert await handshake_status(ws_url(srv, "/twilio")) == 101  # one budget for both paths
        try:
            async with connect(ws_url(srv)):
                raise AssertionError("a fourth session within the minute was admitted")
        except InvalidStatus as exc:
            assert exc.response.status_code == 429
            assert 1 <= int(exc.response.headers["Retry-After"]) <= 60
        assert await handshake_status(ws_url(srv, "/twilio")) == 429
        # a client cannot escape by claiming another address: no proxy is trusted
        assert (
            await handshake_status(ws_url(srv), additional_headers={"X-Forwarded-For": "198.51.100.9"}) == 429
        )
        assert srv.metrics.sessions_refused == {"rate": 3}
        assert 'voice_pipeline_sessions_refused_total{reason="rate"} 3' in srv.metrics.render()
        # plain HTTP is not limited
        assert (await http_get(srv.url + "healthz"))[0] == 200


async def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget(
    engines: Engines, config: Config
) -> None:
    async with running_server(
        engines, config, max_new_sessions_per_ip_per_min=1, max_sessions=4, trusted_proxies=("127.0.0.1",)
    ) as srv:

        def via_proxy(xff: str) -> dict[str, Any]:
            return {"additional_headers": {"X-Forwarded-For": xff}}

        assert await handshake_status(ws_url(srv), **via_proxy("198.51.100.1")) == 101
        assert await handshake_status(ws_url(srv), **via_proxy("198.51.100.1")) == 429
        assert await handshake_status(ws_url(srv), **via_proxy("198.51.100.2")) == 101
        # what the client prepends is ignored: the proxy's right-most entry counts
        assert await handshake_status(ws_url(srv), **via_proxy("203.0.113.7, 198.51.100.2")) == 429
        # IPv6 clients share a budget per /64
        assert await handshake_status(ws_url(srv), **via_proxy("2001:db8:0:1::a")) == 101
        assert await handshake_status(ws_url(srv), **via_proxy("2001:db8:0:1::b")) == 429
        # the proxy itself (no header) has its own budget too
        assert await handshake_status(ws_url(srv)) == 101
        assert srv.metrics.sessions_refused == {"rate": 3}


# ------------------------------------------------------------ TLS


async def test_tls_serves_wss_and_https_to_a_client_that_trusts_the_certificate(
    engines: Engines, config: Config, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    trusting = ssl.create_default_context(cafile=str(cert))
    async with running_server(engines, config, certfile=str(cert), keyfile=str(key), auth_token=TOKEN) as srv:
        assert srv.url.startswith("https://127.0.0.1:")
        status, body = await http_get(srv.url + "healthz", trusting)
        assert status == 200 and json.loads(body)["status"] == "ok"
        # a whole spoken turn over wss://
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with voice_client(
            ws_url(srv, scheme="wss"), ssl=trusting, additional_headers=headers
        ) as client:
            await client.start()
            client.start_microphone()
            client.say(espeak(QUESTION))
            latency = await client.wait_for(lambda m: m["type"] == "turn.latency", 120)
        record = latency["record"]
        assert word_error_rate(QUESTION, record["user_text"]) <= 0.15, record["user_text"]
        assert "paris" in record["assistant_text"].lower(), record["assistant_text"]
        pcm = np.concatenate([f.pcm for f in client.audio])
        assert len(pcm) > 0 and np.abs(pcm).max() > 0
        # a client that does not trust the certificate, or speaks plain ws://, gets nowhere
        with pytest.raises(ssl.SSLCertVerificationError):
            await connect(ws_url(srv, scheme="wss"), ssl=ssl.create_default_context(), open_timeout=30)
        with pytest.raises(urllib.error.URLError):
            await http_get(srv.url + "healthz", ssl.create_default_context())
        with pytest.raises((OSError, InvalidStatus, asyncio.TimeoutError, Exception)) as plain:
            await connect(ws_url(srv), open_timeout=10)
        assert not isinstance(plain.value, AssertionError)


# ------------------------------------------------------------ no secrets or audio in the logs

#: a run of base64 long enough to be an audio payload (a 20 ms µ-law frame is 216 characters)
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{48,}={0,2}")
HEX_BYTES = re.compile(r"(?:\b[0-9a-f]{2} ){16,}")


def _record_text(record: logging.LogRecord) -> str:
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        text += " " + repr(record.exc_info[1])
    return text


async def test_logs_at_debug_hold_no_token_no_audio_and_no_transcript_at_info(
    engines: Engines, config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with running_server(
        engines, config, auth_token=TOKEN, twilio_token=TWILIO_TOKEN, max_sessions=4
    ) as srv:
        assert logging.getLogger("voice_pipeline.server.connection").isEnabledFor(logging.DEBUG)
        # refused attempts: a wrong token in the header and in the query
        assert (
            await handshake_status(ws_url(srv), additional_headers={"Authorization": f"Bearer {TOKEN}x"})
            == 401
        )
        assert await handshake_status(ws_url(srv) + f"?token=x{TOKEN}") == 401
        # a spoken turn with the token in the query (as the demo page does)
        async with voice_client(ws_url(srv) + f"?token={TOKEN}") as client:
            await client.start()
            await client.send(b"\x01\x02\x03")  # a bad frame: logged at DEBUG
            client.start_microphone()
            client.say(espeak(QUESTION))
            latency = await client.wait_for(lambda m: m["type"] == "turn.latency", 120)
            await client.send({"type": "stop"})
        # a phone call: a wrong token, then the right one with the question spoken
        async with twilio_caller(ws_url(srv, "/twilio")) as caller:
            await caller.start(token=f"{TWILIO_TOKEN}x")
            assert await caller.wait_closed() == (1008, "bad or missing token")
        async with twilio_caller(ws_url(srv, "/twilio")) as caller:
            await caller.start(token=TWILIO_TOKEN)
            caller.say(espeak(QUESTION))
            await caller.wait_until(lambda: len(caller.of("media")) >= 10, 120)  # reply audio came
            await caller.stop()
            await caller.wait_closed()
    # the test's own client logs its wire at DEBUG, token included: the capture would see it
    client_lines = [r.getMessage() for r in caplog.records if r.name == "websockets.client"]
    assert any(TOKEN in line for line in client_lines)
    assert any("BINARY" in line for line in client_lines)
    records = [r for r in caplog.records if r.name != "websockets.client"]  # the server's side
    assert any(r.levelno == logging.DEBUG and r.name.startswith("voice_pipeline") for r in records)
    assert not [r for r in records if r.name.startswith("websockets") and r.levelno <= logging.DEBUG]
    assert any("refused" in r.getMessage() for r in records)  # the refusals were logged ...
    user_text = latency["record"]["user_text"].strip()
    reply_text = latency["record"]["assistant_text"].strip()
    assert user_text and reply_text
    for record in records:
        text = _record_text(record)
        where = f"{record.name} {record.levelname}: {text[:200]}"
        for secret in (TOKEN, TWILIO_TOKEN, TOKEN[:12], TWILIO_TOKEN[:12]):  # ... without the token
            assert secret not in text, where
        assert not BASE64_RUN.search(text), where
        assert not HEX_BYTES.search(text), where
        assert "BINARY" not in text and "TEXT" not in text.split(":", 1)[0], where  # websockets frame lines
        assert not any(isinstance(a, bytes | bytearray | memoryview | np.ndarray) for a in _args(record)), (
            where
        )
        if record.levelno >= logging.INFO and record.name.startswith("voice_pipeline"):
            # what the user said is personal data: DEBUG only
            assert user_text not in text, where
            if record.name.startswith("voice_pipeline.server"):
                assert reply_text not in text, where


def _args(record: logging.LogRecord) -> tuple[Any, ...]:
    args = record.args
    if isinstance(args, tuple):
        return args
    return tuple(args.values()) if isinstance(args, dict) else ()
