"""A real :class:`VoiceServer` on a free loopback port, for the end-to-end tests."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.server.app import VoiceServer


@contextlib.asynccontextmanager
async def running_server(engines: Engines, config: Config, **server: Any) -> AsyncIterator[VoiceServer]:
    """Serve ``engines`` with ``config`` (``server:`` fields overridden by ``server``) on a
    free port until the block ends."""
    settings = {"port": 0, **server}
    cfg = dataclasses.replace(config, server=dataclasses.replace(config.server, **settings))
    srv = VoiceServer(engines, cfg)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.aclose()


def ws_url(srv: VoiceServer) -> str:
    return f"ws://127.0.0.1:{srv.port}/ws"
