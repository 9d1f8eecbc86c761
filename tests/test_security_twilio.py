"""Who may call ``/twilio`` and AudioSocket, and what ``serve`` says about it (SECURITY.md).

Twilio's signature is computed here as Twilio documents it
(twilio.com/docs/usage/webhooks/webhooks-security): base64 of the HMAC-SHA1, keyed
with the account's auth token, of the full URL followed by the POST parameters
sorted by name (none for the GET of a WebSocket handshake). Media Streams connect
to ``wss://`` URLs; the test server speaks plain ws on loopback, as it would behind
a TLS proxy that passes the Host header on. The servers run on the fake engines:
admission happens before any model is involved.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
from typing import Any

import pytest
from fakes import Fakes
from servers import running_server, with_server
from twilioclient import twilio_caller
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from voice_pipeline.config import Config, TelephonyConfig, load_config
from voice_pipeline.errors import ConfigError
from voice_pipeline.server.app import VoiceServer
from voice_pipeline.server.endpoints import endpoint_summary
from voice_pipeline.telephony.twilio_auth import TwilioAccess, signed_urls, twilio_access, twilio_signature
from voice_pipeline.telephony.twilio_connection import TwilioConnection

AUTH_TOKEN = "12345-twilio-auth-token-never-logged"
SERVER_TOKEN = "srv-8f1e"


def documented_signature(auth_token: str, url: str, params: dict[str, str] | None = None) -> str:
    """Twilio's algorithm, written out from its documentation (not the server's code)."""
    data = url
    for name in sorted(params or {}):
        data += name + (params or {})[name]
    mac = hmac.new(auth_token.encode("utf-8"), data.encode("utf-8"), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode()


def phone_server(**settings: Any) -> contextlib.AbstractAsyncContextManager[VoiceServer]:
    return running_server(Fakes().engines(), Config(), **{"max_sessions": 4, **settings})


def twilio_url(srv: VoiceServer) -> str:
    return f"ws://127.0.0.1:{srv.port}/twilio"


def signed_as(srv: VoiceServer) -> str:
    """The URL Twilio was given (<Stream url=...>) for this server, as its Host header says."""
    return f"wss://127.0.0.1:{srv.port}/twilio"


async def handshake(url: str, signature: str | None = None) -> int:
    headers = {} if signature is None else {"X-Twilio-Signature": signature}
    try:
        async with connect(url, additional_headers=headers, open_timeout=10):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


# ------------------------------------------------------------ the signature (pure)


def test_the_signature_is_the_one_twilio_documents() -> None:
    url = "https://example.com/myapp.php?foo=1&bar=2"
    params = {"To": "+18005551212", "From": "+14158675310", "CallSid": "CA1234567890ABCDE", "Digits": "1234"}
    assert twilio_signature(AUTH_TOKEN, url, params) == documented_signature(AUTH_TOKEN, url, params)
    ws = "wss://voice.example.org/twilio"
    assert twilio_signature(AUTH_TOKEN, ws) == documented_signature(AUTH_TOKEN, ws)
    assert twilio_signature("another token", ws) != documented_signature(AUTH_TOKEN, ws)


def test_the_signed_url_is_rebuilt_from_the_host_header_with_and_without_443() -> None:
    assert signed_urls("voice.example.org", "/twilio") == [
        "wss://voice.example.org/twilio",
        "wss://voice.example.org:443/twilio",
    ]
    assert signed_urls("voice.example.org:443", "/twilio")[0] == "wss://voice.example.org/twilio"
    assert signed_urls("[::1]:8765", "/twilio")[0] == "wss://[::1]:8765/twilio"


@pytest.mark.parametrize(
    ("settings", "guarded", "access"),
    [
        ({}, False, TwilioAccess.ANONYMOUS),  # loopback, no server token: this machine's own tests
        ({}, True, TwilioAccess.CLOSED),
        ({"allow_anonymous": True}, True, TwilioAccess.ANONYMOUS),
        ({"twilio_token": "t"}, True, TwilioAccess.TOKEN),
        ({"twilio_auth_token": "a"}, True, TwilioAccess.SIGNED),
        ({"twilio_auth_token": "a", "allow_anonymous": True}, False, TwilioAccess.SIGNED),
    ],
)
def test_what_a_twilio_caller_must_show(
    settings: dict[str, Any], guarded: bool, access: TwilioAccess
) -> None:
    assert twilio_access(TelephonyConfig(**settings), guarded=guarded) is access


# ------------------------------------------------------------ the server


async def test_a_server_with_a_token_refuses_an_anonymous_twilio_call() -> None:
    async with phone_server(auth_token=SERVER_TOKEN) as srv:
        assert await handshake(twilio_url(srv)) == 403
        assert srv.metrics.sessions_refused == {"anonymous": 1}
        assert srv.metrics.sessions_total == 0
    async with phone_server(auth_token=SERVER_TOKEN, allow_anonymous=True) as srv:  # opened explicitly
        assert await handshake(twilio_url(srv)) == 101


async def test_a_server_beyond_loopback_refuses_an_anonymous_twilio_call() -> None:
    async with phone_server(host="0.0.0.0") as srv:
        assert await handshake(twilio_url(srv)) == 403
    async with phone_server() as srv:  # loopback, no token: open, as before
        assert await handshake(twilio_url(srv)) == 101


async def test_with_an_auth_token_only_correctly_signed_calls_are_taken(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with phone_server(auth_token=SERVER_TOKEN, twilio_auth_token=AUTH_TOKEN) as srv:
        url, signed = twilio_url(srv), signed_as(srv)
        assert await handshake(url) == 403  # no signature
        assert await handshake(url, documented_signature("wrong token", signed)) == 403
        assert await handshake(url, documented_signature(AUTH_TOKEN, signed + "/other")) == 403
        assert await handshake(url, documented_signature(AUTH_TOKEN, signed.replace("wss", "https"))) == 403
        assert srv.metrics.sessions_refused == {"signature": 4}
        # signed as Twilio signs it: the call is taken, and its stream starts a session
        good = documented_signature(AUTH_TOKEN, signed)
        async with twilio_caller(url, additional_headers={"X-Twilio-Signature": good}) as caller:
            await caller.start()
            async with asyncio.timeout(10):
                while not any(isinstance(c, TwilioConnection) and c.session for c in srv.connections):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
        assert srv.metrics.sessions_total == 1
    assert AUTH_TOKEN not in caplog.text and good not in caplog.text


async def test_the_signature_and_the_stream_token_can_be_required_together() -> None:
    async with phone_server(twilio_auth_token=AUTH_TOKEN, twilio_token="stream-t") as srv:
        headers = {"X-Twilio-Signature": documented_signature(AUTH_TOKEN, signed_as(srv))}
        async with connect(twilio_url(srv), additional_headers=headers) as ws:
            caller_closed = asyncio.create_task(ws.wait_closed())
            await ws.send('{"event": "connected", "protocol": "Call", "version": "1.0.0"}')
            start = (
                '{"event": "start", "sequenceNumber": "1", "streamSid": "MZ1", "start": {"accountSid": "AC0",'
                ' "streamSid": "MZ1", "callSid": "CA0", "tracks": ["inbound"], "customParameters": {},'
                ' "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}'
            )
            await ws.send(start)  # signed, but without the stream token
            await asyncio.wait_for(caller_closed, 10)
            assert ws.close_code == 1008


# ------------------------------------------------------------ AudioSocket's allow-list


def test_an_audiosocket_allow_list_open_to_everyone_must_be_explicit(tmp_path: Any) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("telephony:\n  audiosocket_allowed_peers: ['0.0.0.0/0']\n")
    with pytest.raises(ConfigError, match=r"telephony.audiosocket_allowed_peers: 0.0.0.0/0 lets any address"):
        load_config(path)
    path.write_text("telephony:\n  audiosocket_allowed_peers: ['::/0']\n  allow_anonymous: true\n")
    assert load_config(path).telephony.audiosocket_allowed_peers == ("::/0",)
    path.write_text("telephony:\n  audiosocket_allowed_peers: ['10.1.2.3']\n")
    assert load_config(path).telephony.audiosocket_allowed_peers == ("10.1.2.3",)


# ------------------------------------------------------------ what serve prints


def summary(**settings: Any) -> str:
    return "\n".join(endpoint_summary(with_server(Config(), **settings), settings.get("audiosocket_port")))


def test_serve_prints_which_endpoints_are_open_and_to_whom() -> None:
    text = summary()
    assert "/ws, /v1/realtime: this machine only; no token needed" in text
    assert "/twilio: this machine only; anyone, no credential" in text
    assert "AudioSocket" not in text  # not listening
    text = summary(host="0.0.0.0", auth_token="t", audiosocket_port=9092)
    assert "/ws, /v1/realtime: any machine that can reach 0.0.0.0; with the token" in text
    assert "/twilio: any machine that can reach 0.0.0.0; nobody: refused (HTTP 403)" in text
    assert "AudioSocket (TCP 0.0.0.0:9092): peers 127.0.0.1/32, ::1/128 only" in text
    assert "/healthz, /metrics: any machine that can reach 0.0.0.0; no token needed" in text
    assert "calls signed by Twilio" in summary(host="0.0.0.0", twilio_auth_token=AUTH_TOKEN)
    assert "carry the token parameter" in summary(host="0.0.0.0", twilio_token="x")
    text = summary(host="::", allow_anonymous=True, audiosocket_port=1, audiosocket_allowed_peers=("::/0",))
    assert "/twilio: any machine that can reach ::; anyone, no credential (telephony.allow_anonymous)" in text
    assert "AudioSocket (TCP [::]:1): any peer (telephony.allow_anonymous)" in text
    assert AUTH_TOKEN not in summary(twilio_auth_token=AUTH_TOKEN)  # never printed
