"""A client's connection to the server (voice_pipeline.connect), against a real server with fakes."""

from __future__ import annotations

import pytest
from fakes import Fakes
from procs import free_port
from servers import running_server, ws_url

from voice_pipeline.config import load_config
from voice_pipeline.connect import (
    ServerSessionError,
    ServerUnreachableError,
    SessionRefusedError,
    close_text_of,
    connect,
    open_session,
)
from voice_pipeline.wire.client_messages import Capabilities, Start, Stop


async def test_nothing_listening_is_unreachable_and_worth_retrying() -> None:
    url = f"ws://127.0.0.1:{free_port()}/ws"
    with pytest.raises(ServerUnreachableError, match=f"server not reachable at {url}") as info:
        await connect(url)
    assert info.value.retryable


async def test_not_a_websocket_url_is_said_so_and_not_retried() -> None:
    with pytest.raises(ServerSessionError, match="not a WebSocket URL: http://x/ws") as info:
        await connect("http://x/ws")
    assert not info.value.retryable and type(info.value) is ServerSessionError


async def test_a_session_starts_and_the_refusals_say_why() -> None:
    async with running_server(Fakes().engines(), load_config(None), max_sessions=1, auth_token="t") as srv:
        url = ws_url(srv)
        with pytest.raises(
            SessionRefusedError, match=r"HTTP 401 \(wrong or missing token: --token\)"
        ) as info:
            await connect(url, "wrong")
        assert info.value.code == 401

        ws, ready = await open_session(url, Start(16000, 24000, Capabilities(playback_reports=True)), "t")
        assert (ready.input_rate_hz, ready.output_rate_hz, ready.version) == (16000, 24000, 1)
        assert set(ready.budgets_ms) >= {"voice_to_voice", "barge_in_stop"}

        with pytest.raises(SessionRefusedError, match="refused the session: closed with 1013") as info:
            await open_session(url, Start(16000, 16000), "t")  # the session limit is 1
        assert info.value.code == 1013 and info.value.retryable

        await ws.send(Stop().serialize())
        await ws.wait_closed()
        assert close_text_of(ws) == "closed with 1000: session ended by the client"

        with pytest.raises(
            SessionRefusedError, match="refused the session: bad_field: 'sample_rate'"
        ) as info:
            await open_session(url, Start(4000, 16000), "t")  # an `error` answer: the same next time
        assert info.value.code is None and not info.value.retryable
