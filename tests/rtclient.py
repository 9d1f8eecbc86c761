"""The official openai SDK as a /v1/realtime client for tests.

:func:`realtime` connects ``AsyncOpenAI().realtime.connect()`` to a running
:class:`~voice_pipeline.server.app.VoiceServer` the way an application would
(``websocket_base_url=ws://host:port/v1``, the token as ``api_key``) and wraps the
connection in a :class:`RealtimeClient` that records every server event in the
background, lets a test wait for one, and streams audio at real-time pace -- or keeps
a microphone open (:meth:`RealtimeClient.microphone`): 20 ms of 24 kHz PCM16 every
20 ms, what :meth:`RealtimeClient.say` queued, else silence.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray
from openai import AsyncOpenAI
from websockets.exceptions import ConnectionClosed

from voice_pipeline.server.app import VoiceServer

CHUNK_MS = 20


def pcm16(audio: NDArray[np.float32]) -> bytes:
    return (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def user_message(text: str) -> dict[str, Any]:
    """A typed user message, as the item of a ``conversation.item.create``."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


class RealtimeClient:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.events: list[Any] = []
        self._changed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._mic: asyncio.Task[None] | None = None
        self._queued: deque[bytes] = deque()
        self._spoken = asyncio.Event()
        self.closed = False

    def start(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            async for event in self.conn:
                self.events.append(event)
                self._changed.set()
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            self._changed.set()

    async def stop(self) -> None:
        for task in (self._mic, self._reader):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def microphone(self) -> None:
        """Send 24 kHz PCM16 from now on, every 20 ms: what was queued, else silence."""
        self._mic = asyncio.get_running_loop().create_task(self._send_mic())

    async def say(self, audio: bytes) -> None:
        """Queue speech for the microphone; return once it has all been sent."""
        step = 48 * CHUNK_MS
        self._queued.extend(audio[i : i + step] for i in range(0, len(audio), step))
        self._spoken.clear()
        await self._spoken.wait()

    def fall_silent(self, after_ms: int) -> None:
        """Stop speaking ``after_ms`` from now: the speech queued beyond it is not sent."""
        keep = -(-after_ms // CHUNK_MS)
        while len(self._queued) > keep:
            self._queued.pop()

    async def _send_mic(self) -> None:
        loop = asyncio.get_running_loop()
        t0, n, quiet = loop.time(), 0, b"\x00\x00" * (24 * CHUNK_MS)
        while True:
            chunk = self._queued.popleft() if self._queued else quiet
            if not self._queued:
                self._spoken.set()
            await self.conn.input_audio_buffer.append(audio=b64(chunk))
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * CHUNK_MS / 1000 - loop.time()))

    def of(self, kind: str, since: int = 0) -> list[Any]:
        return [e for e in self.events[since:] if e.type == kind]

    async def wait_for(self, match: Callable[[Any], bool], timeout_s: float = 60.0, since: int = 0) -> Any:
        """The first event from ``since`` on that ``match``es (waits for it). On a timeout the
        error lists what did come (deltas left out; a response's status said)."""
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    for event in self.events[since:]:
                        if match(event):
                            return event
                    if self.closed:
                        raise AssertionError(f"closed; got {[e.type for e in self.events[since:]]}")
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            came = [_said(e) for e in self.events[since:] if not e.type.endswith(".delta")]
            raise AssertionError(f"nothing matched in {timeout_s} s; got {came}") from None

    async def wait_type(self, kind: str, timeout_s: float = 60.0, since: int = 0) -> Any:
        return await self.wait_for(lambda e: e.type == kind, timeout_s, since)

    async def send(self, event: dict[str, Any]) -> None:
        await self.conn.send(event)

    async def send_raw(self, text: str | bytes) -> None:
        await self.conn.send_raw(text)

    async def stream(self, audio: bytes, *, bytes_per_ms: int = 48, paced: bool = True) -> None:
        """Append ``audio`` (wire bytes of the session's input format) in 20 ms events, at
        real-time pace: as a microphone would."""
        step = bytes_per_ms * CHUNK_MS
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for n, i in enumerate(range(0, len(audio), step)):
            await self.conn.input_audio_buffer.append(audio=b64(audio[i : i + step]))
            if paced:
                await asyncio.sleep(max(0.0, t0 + (n + 1) * CHUNK_MS / 1000 - loop.time()))


@contextlib.asynccontextmanager
async def realtime(srv: VoiceServer, api_key: str = "no-token") -> AsyncIterator[RealtimeClient]:
    client = AsyncOpenAI(api_key=api_key, websocket_base_url=f"ws://127.0.0.1:{srv.port}/v1")
    async with client.realtime.connect(model="voice-pipeline") as conn:
        rt = RealtimeClient(conn)
        rt.start()
        try:
            yield rt
        finally:
            await rt.stop()


def _said(event: Any) -> str:
    """An event's type, and a response's id and status (what a timeout needs to be read)."""
    response = getattr(event, "response", None)
    if response is None:
        return str(event.type)
    return f"{event.type}({response.id}: {response.status})"
