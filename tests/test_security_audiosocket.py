"""AudioSocket admits allow-listed peers only (``telephony.audiosocket_allowed_peers``), real models.

AudioSocket has no authentication: the peer's address is the only check. A peer
outside the list is disconnected before anything it sends is read, no session
is made, and the log names its address and nothing of what it sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator

import pytest
from polling import until
from speech import espeak
from test_telephony_audiosocket import asterisk

from voice_pipeline.audio import to_int16
from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.telephony.audiosocket import Kind, frame
from voice_pipeline.telephony.audiosocket_server import AudioSocketServer

pytestmark = pytest.mark.real_models

QUESTION = "What is the capital of France?"


@contextlib.asynccontextmanager
async def audiosocket_server(
    engines: Engines, config: Config, peers: tuple[str, ...], host: str = "127.0.0.1"
) -> AsyncIterator[AudioSocketServer]:
    tcfg = dataclasses.replace(config.telephony, audiosocket_allowed_peers=peers)
    srv = AudioSocketServer(engines, dataclasses.replace(config, telephony=tcfg), host, 0)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.aclose()


async def test_a_peer_outside_the_list_is_dropped_before_anything_is_read(
    engines: Engines, config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    call_id = uuid.uuid4()
    speech = to_int16(espeak(QUESTION, 8000)).astype("<i2").tobytes()
    async with audiosocket_server(engines, config, ("192.0.2.0/24", "2001:db8::/32")) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        try:
            writer.write(frame(Kind.UUID, call_id.bytes))
            for i in range(0, len(speech), 320):
                writer.write(frame(Kind.SLIN, speech[i : i + 320].ljust(320, b"\0")))
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            with contextlib.suppress(ConnectionError):
                assert await asyncio.wait_for(reader.read(), 30) == b""  # closed, nothing sent back
        finally:
            writer.close()
        assert srv.refused_peers == 1
        assert len(srv.sessions) == 0 and not srv.calls
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("voice_pipeline")]
    assert any("refused a connection from 127.0.0.1" in line for line in lines), lines
    for line in lines:
        assert call_id.hex not in line and str(call_id) not in line


async def test_an_allowed_peer_gets_a_call_with_a_reply(engines: Engines, config: Config) -> None:
    async with audiosocket_server(engines, config, ("10.0.0.0/8", "127.0.0.0/8")) as srv:
        async with asterisk(srv) as pbx:
            pbx.begin()
            pbx.say(espeak(QUESTION))
            await until(lambda: len(pbx.audio()) >= 25, 120)  # half a second of reply
            await pbx.hang_up()
        assert srv.refused_peers == 0 and len(srv.sessions) == 1


async def test_ipv6_loopback_is_allowed_by_default_and_ipv4_only_lists_refuse_it(
    engines: Engines, config: Config
) -> None:
    default = config.telephony.audiosocket_allowed_peers
    for peers, refused in ((default, 0), (("127.0.0.1/32",), 1)):
        async with audiosocket_server(engines, config, peers, host="::1") as srv:
            reader, writer = await asyncio.open_connection("::1", srv.port)
            writer.write(frame(Kind.UUID, uuid.uuid4().bytes))
            await writer.drain()
            if refused:
                with contextlib.suppress(ConnectionError):  # a reset: it closed with our bytes unread
                    assert await asyncio.wait_for(reader.read(), 30) == b""
            else:
                await until(lambda: len(srv.sessions) == 1, 30)
                writer.write(frame(Kind.HANGUP))
                await writer.drain()
            writer.close()
            await until(lambda: not srv.calls, 30)
            assert srv.refused_peers == refused
