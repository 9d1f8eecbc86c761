"""``serve`` starts listening: the WebSocket server, then AudioSocket's, or neither.

If the AudioSocket port cannot be bound, the WebSocket server that already listens is
closed before the error goes up: a failed start leaves no listener behind.
"""

from __future__ import annotations

import os

from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.errors import VoicePipelineError
from voice_pipeline.server.app import VoiceServer
from voice_pipeline.telephony.audiosocket_server import AudioSocketServer


async def start_listening(server: VoiceServer, engines: Engines, cfg: Config) -> AudioSocketServer | None:
    """Start ``server`` and, if ``telephony.audiosocket_port`` is set, an AudioSocket
    server sharing its session limit and metrics; VoicePipelineError if a port is taken."""
    host = cfg.server.host
    try:
        await server.start()
    except OSError as exc:
        raise VoicePipelineError(f"cannot listen on {host}:{cfg.server.port}: {_reason(exc)}") from exc
    port = cfg.telephony.audiosocket_port
    if port is None:
        return None
    phones = AudioSocketServer(engines, cfg, host, port, limit=server.limit)  # /ws's limit and metrics
    try:
        await phones.start()
    except BaseException as exc:
        await server.aclose()
        if isinstance(exc, OSError):
            raise VoicePipelineError(f"cannot listen on {host}:{port}: {_reason(exc)}") from exc
        raise
    return phones


def _reason(exc: OSError) -> str:
    """ "Address already in use", not asyncio's "error while attempting to bind on ..."."""
    return os.strerror(exc.errno) if exc.errno else str(exc)
