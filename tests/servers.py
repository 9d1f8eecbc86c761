"""A real :class:`VoiceServer` on a free loopback port, for the end-to-end tests."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from voice_pipeline.config import Config, TelephonyConfig
from voice_pipeline.engines import Engines
from voice_pipeline.server.app import VoiceServer


@contextlib.asynccontextmanager
async def running_server(engines: Engines, config: Config, **server: Any) -> AsyncIterator[VoiceServer]:
    """Serve ``engines`` with ``config`` (``server:`` and ``telephony:`` fields overridden by
    ``server``) on a free port until the block ends."""
    cfg = with_server(config, **{"port": 0, **server})
    srv = VoiceServer(engines, cfg)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.aclose()


def with_server(config: Config, **settings: Any) -> Config:
    """``config`` with these ``server:`` fields, and ``telephony:`` ones for the phone edges."""
    phone = {f.name for f in dataclasses.fields(TelephonyConfig)}
    telephony = {k: v for k, v in settings.items() if k in phone}
    server = {k: v for k, v in settings.items() if k not in phone}
    return dataclasses.replace(
        config,
        server=dataclasses.replace(config.server, **server),
        telephony=dataclasses.replace(config.telephony, **telephony),
    )


def ws_url(srv: VoiceServer) -> str:
    return f"ws://127.0.0.1:{srv.port}/ws"
