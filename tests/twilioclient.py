"""A simulated Twilio Media Streams caller for tests (the protocol as Twilio speaks it).

* Sends ``connected``, then ``start`` (streamSid, callSid, tracks,
  customParameters, mediaFormat audio/x-mulaw 8000 Hz mono), then ``media``:
  20 ms µ-law frames (160 bytes, base64) at real-time pace, always -- speech
  queued with :meth:`TwilioCaller.say`, else silence, like a live call.
* Plays what the server sends like Twilio does: ``media`` payloads go into a
  playout buffer played in real time; a ``mark`` is echoed once all audio sent
  before it has played; ``clear`` empties the buffer and echoes every pending
  mark at once.
* Records every inbound message with its arrival time, the most audio ever
  buffered at this end, and the audio actually played.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import soxr
from numpy.typing import NDArray
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from voice_pipeline.audio import to_int16
from voice_pipeline.telephony import mulaw

FRAME = 160  # samples (= bytes of µ-law) per 20 ms at 8 kHz
TICK_S = 0.01

Msg = dict[str, Any]


@dataclass
class Received:
    t: float  # loop time it arrived
    msg: Msg


class TwilioCaller:
    def __init__(self, ws: ClientConnection, stream_sid: str = "MZ00000000000000000000000000000001") -> None:
        self.ws = ws
        self.stream_sid = stream_sid
        self.received: list[Received] = []
        self.played: list[bytes] = []  # µ-law the far end actually played
        self.marks_echoed: list[str] = []
        self.clears = 0
        self.max_buffered = 0  # most samples ever waiting in the playout buffer
        self._buffer: deque[bytes | str] = deque()  # payloads and mark names, in order
        self._speech: deque[NDArray[np.float32]] = deque()
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()
        self.closed = False
        self._chunk = 0

    # ------------------------------------------------------------ lifecycle

    async def start(self, token: str | None = None) -> None:
        await self.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        params = {"token": token} if token is not None else {}
        start = {
            "accountSid": "AC0",
            "streamSid": self.stream_sid,
            "callSid": "CA0",
            "tracks": ["inbound"],
            "customParameters": params,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        }
        await self.send(
            {"event": "start", "sequenceNumber": "1", "start": start, "streamSid": self.stream_sid}
        )
        self._tasks.append(asyncio.create_task(self._microphone()))
        self._tasks.append(asyncio.create_task(self._play()))

    def start_reading(self) -> None:
        self._tasks.append(asyncio.create_task(self._read()))

    async def stop(self) -> None:
        await self.send({"event": "stop", "sequenceNumber": "9", "stop": {}, "streamSid": self.stream_sid})

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ws.close()

    # ------------------------------------------------------------ sending

    async def send(self, msg: Msg | str | bytes) -> None:
        await self.ws.send(json.dumps(msg) if isinstance(msg, dict) else msg)

    def media(self, payload: bytes) -> Msg:
        self._chunk += 1
        return {
            "event": "media",
            "sequenceNumber": str(self._chunk + 1),
            "media": {
                "track": "inbound",
                "chunk": str(self._chunk),
                "timestamp": str(self._chunk * 20),
                "payload": base64.b64encode(payload).decode(),
            },
            "streamSid": self.stream_sid,
        }

    def say(self, speech16k: NDArray[np.float32]) -> None:
        self._speech.append(soxr.resample(speech16k, 16000, 8000, quality="HQ").astype(np.float32))

    @property
    def speaking(self) -> bool:
        return bool(self._speech)

    async def _microphone(self) -> None:
        loop = asyncio.get_running_loop()
        pending = np.zeros(0, dtype=np.float32)
        t0, n = loop.time(), 0
        with contextlib.suppress(ConnectionClosed):
            while True:
                while len(pending) < FRAME and self._speech:
                    pending = np.concatenate([pending, self._speech.popleft()])
                chunk, pending = pending[:FRAME], pending[FRAME:]
                chunk = np.concatenate([chunk, np.zeros(FRAME - len(chunk), dtype=np.float32)])
                n += 1
                await asyncio.sleep(max(0.0, t0 + n * FRAME / 8000 - loop.time()))
                await self.send(self.media(mulaw.encode(to_int16(chunk))))

    # ------------------------------------------------------------ the far end

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for data in self.ws:
                assert isinstance(data, str), "Media Streams messages are JSON text"
                msg = json.loads(data)
                self.received.append(Received(loop.time(), msg))
                assert msg.get("streamSid") == self.stream_sid, msg
                match msg["event"]:
                    case "media":
                        self._buffer.append(base64.b64decode(msg["media"]["payload"]))
                        self.max_buffered = max(self.max_buffered, self.buffered)
                    case "mark":
                        self._buffer.append(msg["mark"]["name"])
                        await self._echo_ready_marks()
                    case "clear":
                        self.clears += 1
                        names = [x for x in self._buffer if isinstance(x, str)]
                        self._buffer.clear()
                        for name in names:
                            await self._echo(name)
                self._notify()
        except ConnectionClosed:
            pass
        self.closed = True
        self._notify()

    @property
    def buffered(self) -> int:
        return sum(len(x) for x in self._buffer if isinstance(x, bytes))

    async def _echo(self, name: str) -> None:
        self.marks_echoed.append(name)
        msg = {"event": "mark", "sequenceNumber": "0", "streamSid": self.stream_sid, "mark": {"name": name}}
        await self.send(msg)

    async def _echo_ready_marks(self) -> None:
        while self._buffer and isinstance(self._buffer[0], str):
            name = self._buffer.popleft()
            assert isinstance(name, str)
            await self._echo(name)

    async def _play(self) -> None:
        """Play the buffer in real time (silence when it is empty), echoing marks as reached."""
        loop = asyncio.get_running_loop()
        last, credit = loop.time(), 0.0
        with contextlib.suppress(ConnectionClosed):
            while True:
                await asyncio.sleep(TICK_S)
                now = loop.time()
                credit += (now - last) * 8000
                last = now
                while self._buffer and (credit >= 1 or isinstance(self._buffer[0], str)):
                    head = self._buffer[0]
                    if isinstance(head, str):
                        await self._echo_ready_marks()
                        continue
                    n = min(len(head), int(credit))
                    self.played.append(head[:n])
                    credit -= n
                    if n == len(head):
                        self._buffer.popleft()
                    else:
                        self._buffer[0] = head[n:]
                if not self._buffer:
                    credit = 0.0  # a dry buffer plays silence: no credit saved for later
                self._notify()

    # ------------------------------------------------------------ waiting

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float = 90.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not condition():
                if self.closed:
                    raise AssertionError(f"closed while waiting: {self.ws.close_code} {self.ws.close_reason}")
                await self._changed.wait()

    async def wait_closed(self, timeout_s: float = 30.0) -> tuple[int | None, str | None]:
        async with asyncio.timeout(timeout_s):
            while not self.closed:
                await self._changed.wait()
        return self.ws.close_code, self.ws.close_reason

    def of(self, event: str) -> list[Received]:
        return [r for r in self.received if r.msg["event"] == event]


@contextlib.asynccontextmanager
async def twilio_caller(url: str, **connect_args: Any) -> Any:
    async with connect(url, **connect_args) as ws:
        caller = TwilioCaller(ws)
        caller.start_reading()
        try:
            yield caller
        finally:
            await caller.aclose()
