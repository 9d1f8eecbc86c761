"""The bench's caller over the voice WebSocket protocol (``/ws``, docs/protocol.md).

Starts with ``playback_reports: false``: the server then assumes the reply is
played in real time from the moment it sent it, which is exactly what the
bench's simulated listener does (it starts playing a frame when it arrives),
so the server's turn ends, heard text and barge-in window match the bench's
listener without ten ``playback`` messages a second per caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
from numpy.typing import NDArray
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from voice_pipeline.bench.tracker import (
    VOICED_LEVEL,
    AudioCleared,
    ReplyAudio,
    ReplyCut,
    SpeechHeard,
    TurnContinuedSeen,
    TurnFailedReported,
    TurnRecorded,
    WireEvent,
)
from voice_pipeline.connect import close_text, close_text_of, connect, start_session
from voice_pipeline.wire.client_messages import Start, Stop, pcm16_frame
from voice_pipeline.wire.server_messages import (
    AudioClear,
    Ready,
    ReplyInterrupted,
    ServerMessage,
    ServerMessageError,
    ServerStream,
    SpeechStarted,
    TurnContinued,
    TurnFailed,
    TurnLatency,
    Unknown,
)


def wire_event(msg: ServerMessage, t_s: float) -> WireEvent | None:
    """What the tracker needs of a server message that arrived at ``t_s`` (None: nothing)."""
    match msg:
        case SpeechStarted(turn_id=tid):
            return SpeechHeard(t_s, tid)
        case AudioClear(turn_id=tid):
            return AudioCleared(t_s, tid)
        case TurnLatency(turn_id=tid, record=record):
            return TurnRecorded(t_s, tid, record)
        case TurnContinued(turn_id=tid):
            return TurnContinuedSeen(t_s, tid)
        case ReplyInterrupted(turn_id=tid, reason=reason):
            return ReplyCut(t_s, tid, reason)
        case TurnFailed(turn_id=tid, stage=stage, message=message):
            return TurnFailedReported(t_s, tid, stage, message)
        case Unknown():
            return None  # from a newer server
    return None


class WebSocketCaller:
    """One session on ``/ws``: PCM16 out at ``rate_hz``, reply audio asked at the same rate."""

    def __init__(self, url: str, token: str | None = None, rate_hz: int = 16000) -> None:
        self.url = url
        self.rate_hz = rate_hz
        self.budgets: dict[str, float] = {}
        self.ready: Ready | None = None
        self.close_info: str | None = None
        self._token = token
        self._ws: ClientConnection | None = None

    async def open(self) -> None:
        self._ws = await connect(self.url, self._token)
        self.ready = await start_session(self._ws, Start(self.rate_hz, self.rate_hz), self.url)
        self.budgets = dict(self.ready.budgets_ms)

    async def send_audio(self, frame: NDArray[np.float32]) -> None:
        assert self._ws is not None
        try:
            await self._ws.send(pcm16_frame(frame))
        except ConnectionClosed:
            pass  # the reader reports the close

    async def events(self) -> AsyncIterator[WireEvent]:
        assert self._ws is not None
        loop = asyncio.get_running_loop()
        stream = ServerStream()
        try:
            async for data in self._ws:
                t = loop.time()
                if isinstance(data, bytes):
                    if (audio := stream.binary(data)) is not None:
                        pcm = audio.pcm
                        voiced = bool(pcm.size) and int(np.abs(pcm.astype(np.int32)).max()) > VOICED_LEVEL
                        yield ReplyAudio(t, audio.turn_id, len(pcm), self.rate_hz, voiced)
                    continue
                if (event := wire_event(stream.text(data), t)) is not None:
                    yield event
        except ConnectionClosed as exc:
            self.close_info = close_text(exc)
        except ServerMessageError as exc:
            self.close_info = f"the server sent a message the bench cannot use: {exc}"
            await self._ws.close()
        else:
            self.close_info = close_text_of(self._ws)

    async def aclose(self) -> None:
        if self._ws is None:
            return
        try:
            await self._ws.send(Stop().serialize())
        except ConnectionClosed:
            pass
        await self._ws.close()
