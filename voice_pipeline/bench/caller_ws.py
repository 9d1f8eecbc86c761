"""The bench's caller over the voice WebSocket protocol (``/ws``, docs/protocol.md).

Starts with ``playback_reports: false``: the server then assumes the reply is
played in real time from the moment it sent it, which is exactly what the
bench's simulated listener does (it starts playing a frame when it arrives),
so the server's turn ends, heard text and barge-in window match the bench's
listener without ten ``playback`` messages a second per caller.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from numpy.typing import NDArray
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from voice_pipeline.audio import to_int16
from voice_pipeline.bench.errors import BenchError, ServerUnreachableError, SessionRefusedError
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

OPEN_TIMEOUT_S = 10.0


def close_text(exc: ConnectionClosed) -> str:
    if exc.rcvd is None:
        return "the connection was lost without a close frame"
    return f"closed with {exc.rcvd.code} ({exc.rcvd.reason or 'no reason given'})"


async def open_websocket(url: str, headers: dict[str, str]) -> ClientConnection:
    """Connect, or raise the bench's error for why not (never a websockets exception)."""
    try:
        return await connect(
            url, additional_headers=headers, compression=None, max_size=None, open_timeout=OPEN_TIMEOUT_S
        )
    except InvalidURI as exc:
        raise BenchError(f"not a WebSocket URL: {url}") from exc
    except InvalidStatus as exc:
        status = exc.response.status_code
        hint = {
            401: " (bad or missing token: --token)",
            403: " (forbidden)",
            404: " (wrong path?)",
            429: " (rate limited: the server's limit of new sessions per client address per minute, "
            "server.max_new_sessions_per_ip_per_min)",
        }.get(status, "")
        raise SessionRefusedError(
            f"the server at {url} refused the connection: HTTP {status}{hint}", status
        ) from exc
    except InvalidHandshake as exc:
        raise SessionRefusedError(f"the server at {url} refused the connection: {exc}") from exc
    except (OSError, TimeoutError) as exc:
        raise ServerUnreachableError(f"server not reachable at {url}: {exc or 'timed out'}") from exc


def refused(url: str, exc: ConnectionClosed) -> SessionRefusedError:
    code = exc.rcvd.code if exc.rcvd is not None else None
    return SessionRefusedError(f"the server at {url} refused the session: {close_text(exc)}", code)


class WebSocketCaller:
    """One session on ``/ws``: PCM16 out at ``rate_hz``, reply audio asked at the same rate."""

    def __init__(self, url: str, token: str | None = None, rate_hz: int = 16000) -> None:
        self.url = url
        self.rate_hz = rate_hz
        self.budgets: dict[str, float] = {}
        self.ready: dict[str, Any] = {}
        self.close_info: str | None = None
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._ws: ClientConnection | None = None

    async def open(self) -> None:
        ws = await open_websocket(self.url, self._headers)
        self._ws = ws
        start = {
            "type": "start",
            "version": 1,
            "sample_rate": self.rate_hz,
            "format": "pcm16",
            "output_sample_rate": self.rate_hz,
            "capabilities": {"playback_reports": False, "echo_cancellation": False},
        }
        try:
            await ws.send(json.dumps(start))
            async with asyncio.timeout(OPEN_TIMEOUT_S):
                while True:
                    data = await ws.recv()
                    if not isinstance(data, str):
                        continue
                    msg = json.loads(data)
                    if msg.get("type") == "ready":
                        self.ready = msg
                        self.budgets = {str(k): float(v) for k, v in dict(msg.get("budgets", {})).items()}
                        return
                    if msg.get("type") == "error":
                        raise SessionRefusedError(
                            f"the server refused the session: {msg.get('code')}: {msg.get('message')}"
                        )
        except ConnectionClosed as exc:
            await ws.close()
            raise refused(self.url, exc) from exc
        except TimeoutError as exc:
            await ws.close()
            raise SessionRefusedError(f"no 'ready' from {self.url} within {OPEN_TIMEOUT_S:g} s") from exc

    async def send_audio(self, frame: NDArray[np.float32]) -> None:
        assert self._ws is not None
        try:
            await self._ws.send(to_int16(frame).astype("<i2").tobytes())
        except ConnectionClosed:
            pass  # the reader reports the close

    async def events(self) -> AsyncIterator[WireEvent]:
        assert self._ws is not None
        loop = asyncio.get_running_loop()
        header: dict[str, Any] | None = None
        try:
            async for data in self._ws:
                t = loop.time()
                if isinstance(data, bytes):
                    if header is None:
                        continue
                    pcm = np.frombuffer(data, dtype="<i2")
                    voiced = bool(pcm.size) and int(np.abs(pcm.astype(np.int32)).max()) > VOICED_LEVEL
                    yield ReplyAudio(t, int(header["turn_id"]), len(pcm), self.rate_hz, voiced)
                    header = None
                    continue
                msg = json.loads(data)
                kind = msg.get("type")
                tid = msg.get("turn_id")
                if kind == "assistant.audio":
                    header = msg
                elif kind == "speech.started":
                    yield SpeechHeard(t, int(tid))
                elif kind == "audio.clear":
                    yield AudioCleared(t, int(tid))
                elif kind == "turn.latency":
                    yield TurnRecorded(t, int(tid), dict(msg["record"]))
                elif kind == "turn.continued":
                    yield TurnContinuedSeen(t, int(tid))
                elif kind == "reply.interrupted":
                    yield ReplyCut(t, int(tid), str(msg.get("reason", "")))
                elif kind == "turn.failed":
                    yield TurnFailedReported(t, int(tid), str(msg.get("stage")), str(msg.get("message")))
        except ConnectionClosed as exc:
            self.close_info = close_text(exc)
        else:
            self.close_info = close_text_of(self._ws)

    async def aclose(self) -> None:
        if self._ws is None:
            return
        try:
            await self._ws.send(json.dumps({"type": "stop"}))
        except ConnectionClosed:
            pass
        await self._ws.close()


def close_text_of(ws: ClientConnection) -> str:
    if ws.close_code is None:
        return "the connection was lost without a close frame"
    return f"closed with {ws.close_code} ({ws.close_reason or 'no reason given'})"
