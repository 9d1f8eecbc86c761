"""A Python client of the voice WebSocket protocol for tests (docs/protocol.md).

* :class:`VoiceClient` records every server message (JSON events, and each
  ``assistant.audio`` header paired with its binary frame) and lets a test wait
  for one. It parses them with :mod:`voice_pipeline.wire` (a malformed message
  fails the test) and keeps each as its JSON object, for the tests to read.
* Its microphone sends 20 ms PCM16 frames at real-time pace, always: what was
  queued with :meth:`VoiceClient.say`, else silence.
* With ``playback_reports`` it also simulates the listener: it plays the reply
  audio it received in real time, drops a turn's queued audio on ``audio.clear``
  (acknowledging with ``playback`` + ``cleared``), and reports what it played
  every 100 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from voice_pipeline.wire.client_messages import Capabilities, ClientMessage, Playback, Start, pcm16_frame
from voice_pipeline.wire.server_messages import AudioClear, ServerMessageError, ServerStream

FRAME_MS = 20
REPORT_S = 0.1

Msg = dict[str, Any]


@dataclass
class AudioFrame:
    header: Msg
    pcm: NDArray[np.int16]


@dataclass
class Listener:
    """A simulated loudspeaker: plays received audio in order, in real time."""

    rate_hz: int
    queue: deque[list[Any]] = field(default_factory=deque)  # [turn_id, samples left]
    played: int = 0
    played_by_turn: dict[int, int] = field(default_factory=dict)

    def receive(self, turn_id: int, samples: int) -> None:
        self.queue.append([turn_id, samples])

    def advance(self, seconds: float) -> None:
        budget = round(seconds * self.rate_hz)
        while budget and self.queue:
            item = self.queue[0]
            n = min(budget, item[1])
            item[1] -= n
            budget -= n
            self.played += n
            self.played_by_turn[item[0]] = self.played_by_turn.get(item[0], 0) + n
            if item[1] == 0:
                self.queue.popleft()

    def clear(self, turn_id: int) -> None:
        self.queue = deque(i for i in self.queue if i[0] != turn_id)


class VoiceClient:
    def __init__(self, ws: ClientConnection, rate_hz: int = 16000) -> None:
        self.ws = ws
        self.rate_hz = rate_hz
        self.messages: list[Msg] = []
        self.audio: list[AudioFrame] = []
        self.listener: Listener | None = None
        self._changed = asyncio.Event()
        self._speech: deque[NDArray[np.float32]] = deque()
        self._tasks: list[asyncio.Task[None]] = []
        self._stream = ServerStream()
        self.closed = False
        #: why the reader stopped if the server broke the protocol (a message that does not parse)
        self.broken: str | None = None

    # ------------------------------------------------------------ lifecycle

    def start_reading(self) -> None:
        self._tasks.append(asyncio.create_task(self._read()))

    async def start(
        self, *, sample_rate: int = 16000, output_sample_rate: int | None = None, reports: bool = False
    ) -> Msg:
        out_rate = sample_rate if output_sample_rate is None else output_sample_rate
        await self.send(Start(sample_rate, out_rate, Capabilities(playback_reports=reports)))
        ready = await self.wait_for(lambda m: m["type"] == "ready")
        if reports:
            self.listener = Listener(int(ready["output_sample_rate"]))
            self._tasks.append(asyncio.create_task(self._play()))
        return ready

    def start_microphone(self) -> None:
        self._tasks.append(asyncio.create_task(self._microphone()))

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ws.close()

    # ------------------------------------------------------------ sending

    async def send(self, msg: ClientMessage | Msg | str | bytes) -> None:
        """A typed message, a JSON object as it is (tests send malformed ones), or a raw frame."""
        if isinstance(msg, dict):
            msg = json.dumps(msg)
        elif not isinstance(msg, str | bytes):
            msg = msg.serialize()
        await self.ws.send(msg)

    def say(self, speech: NDArray[np.float32]) -> None:
        self._speech.append(speech)

    async def _microphone(self) -> None:
        loop = asyncio.get_running_loop()
        frame = self.rate_hz * FRAME_MS // 1000
        pending = np.zeros(0, dtype=np.float32)
        t0, n = loop.time(), 0
        with contextlib.suppress(ConnectionClosed):
            while True:
                while len(pending) < frame and self._speech:
                    pending = np.concatenate([pending, self._speech.popleft()])
                chunk, pending = pending[:frame], pending[frame:]
                if len(chunk) < frame:
                    chunk = np.concatenate([chunk, np.zeros(frame - len(chunk), dtype=np.float32)])
                n += 1
                await asyncio.sleep(max(0.0, t0 + n * FRAME_MS / 1000 - loop.time()))
                await self.ws.send(pcm16_frame(chunk))

    @property
    def speaking(self) -> bool:
        return bool(self._speech)

    # ------------------------------------------------------------ receiving

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                if isinstance(data, bytes):
                    audio = self._stream.binary(data)
                    assert audio is not None, "binary frame without an assistant.audio header"
                    self.audio.append(AudioFrame(audio.header.to_json(), audio.pcm))
                    if self.listener is not None:
                        self.listener.receive(audio.turn_id, len(audio.pcm))
                else:
                    msg = self._stream.text(data)
                    self.messages.append(msg.to_json())
                    if isinstance(msg, AudioClear) and self.listener is not None:
                        self.listener.clear(msg.turn_id)
                        await self.send(Playback(self.listener.played, cleared=msg.turn_id))
                self._notify()
        except ConnectionClosed:
            pass
        except ServerMessageError as exc:
            self.broken = str(exc)
        self.closed = True
        self._notify()

    async def _play(self) -> None:
        assert self.listener is not None
        loop = asyncio.get_running_loop()
        last = loop.time()
        with contextlib.suppress(ConnectionClosed):
            while True:
                await asyncio.sleep(REPORT_S)
                now = loop.time()
                self.listener.advance(now - last)
                last = now
                await self.send(Playback(self.listener.played))
                self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float = 90.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not condition():
                if self.closed:
                    why = self.broken or f"{self.ws.close_code} {self.ws.close_reason}"
                    raise AssertionError(f"closed while waiting: {why}")
                await self._changed.wait()

    async def wait_for(self, match: Callable[[Msg], bool], timeout_s: float = 90.0) -> Msg:
        """The first message (received so far or later) that ``match`` accepts."""
        found: list[Msg] = []

        def seen() -> bool:
            found[:] = [m for m in self.messages if match(m)][:1]
            return bool(found)

        await self.wait_until(seen, timeout_s)
        return found[0]

    async def wait_closed(self, timeout_s: float = 30.0) -> tuple[int | None, str | None]:
        """The server's close code and reason, once the connection is closed."""
        async with asyncio.timeout(timeout_s):
            while not self.closed:
                await self._changed.wait()
        return self.ws.close_code, self.ws.close_reason

    def of(self, kind: str) -> list[Msg]:
        return [m for m in self.messages if m["type"] == kind]


@contextlib.asynccontextmanager
async def voice_client(url: str, rate_hz: int = 16000, **connect_args: Any) -> Any:
    async with connect(url, **connect_args) as ws:
        client = VoiceClient(ws, rate_hz)
        client.start_reading()
        try:
            yield client
        finally:
            await client.aclose()
