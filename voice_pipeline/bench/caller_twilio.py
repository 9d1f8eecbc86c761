"""The bench's caller over Twilio Media Streams (``/twilio``), speaking as Twilio does.

Sends ``connected`` and ``start`` (µ-law 8 kHz mono; ``customParameters.token``
when a token is given), then a ``media`` message of 20 ms µ-law every 20 ms.
Plays what arrives like Twilio: ``media`` payloads fill a playout buffer that
drains in real time, a ``mark`` is echoed once everything sent before it has
played, and ``clear`` empties the buffer and echoes every pending mark at once
(the server's heard position and turn ends depend on those echoes).

Twilio's protocol has no turn ids and no latency records: reply audio is
attributed by timing (see :mod:`.tracker`) and there is no per-stage breakdown.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator

import numpy as np
from numpy.typing import NDArray
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from voice_pipeline.audio import to_int16
from voice_pipeline.bench.tracker import VOICED_LEVEL, AudioCleared, ReplyAudio, WireEvent
from voice_pipeline.cancellation import cancel_and_wait
from voice_pipeline.connect import SessionRefusedError, close_text_of, connect
from voice_pipeline.telephony import mulaw

RATE_HZ = 8000
#: a refusal (1013 at once, 1008 for a bad token after ``start``) comes within this
REFUSAL_WAIT_S = 0.5


class TwilioCaller:
    def __init__(self, url: str, token: str | None = None, stream_sid: str = "MZbench0") -> None:
        self.url = url
        self.rate_hz = RATE_HZ
        self.budgets: dict[str, float] = {}  # Twilio has no ``ready``
        self.close_info: str | None = None
        self._token = token
        self._sid = stream_sid
        self._ws: ClientConnection | None = None
        self._chunk = 0
        self._playout_end = 0.0  # loop time the far end's buffer runs dry
        self._marks: deque[tuple[float, str]] = deque()  # (due, name), in order
        self._marks_changed = asyncio.Event()
        self._echo_task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        ws = await connect(self.url)
        self._ws = ws
        start = {
            "accountSid": "ACbench",
            "streamSid": self._sid,
            "callSid": "CAbench",
            "tracks": ["inbound"],
            "customParameters": {"token": self._token} if self._token else {},
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": RATE_HZ, "channels": 1},
        }
        try:
            await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
            await ws.send(
                json.dumps({"event": "start", "sequenceNumber": "1", "start": start, "streamSid": self._sid})
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ws.wait_closed(), REFUSAL_WAIT_S)
        except ConnectionClosed:
            pass
        if ws.close_code is not None:
            raise SessionRefusedError(
                f"the server at {self.url} refused the call: {close_text_of(ws)}", ws.close_code
            )
        self._echo_task = asyncio.get_running_loop().create_task(self._echo_marks())

    async def send_audio(self, frame: NDArray[np.float32]) -> None:
        assert self._ws is not None
        self._chunk += 1
        media = {
            "track": "inbound",
            "chunk": str(self._chunk),
            "timestamp": str(self._chunk * 20),
            "payload": base64.b64encode(mulaw.encode(to_int16(frame))).decode("ascii"),
        }
        msg = {
            "event": "media",
            "sequenceNumber": str(self._chunk + 1),
            "media": media,
            "streamSid": self._sid,
        }
        with contextlib.suppress(ConnectionClosed):
            await self._ws.send(json.dumps(msg))

    async def _echo(self, name: str) -> None:
        assert self._ws is not None
        msg = {"event": "mark", "sequenceNumber": "0", "streamSid": self._sid, "mark": {"name": name}}
        with contextlib.suppress(ConnectionClosed):
            await self._ws.send(json.dumps(msg))

    async def _echo_marks(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._marks:
                self._marks_changed.clear()
                await self._marks_changed.wait()
                continue
            due, name = self._marks[0]
            if loop.time() < due:
                self._marks_changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._marks_changed.wait(), due - loop.time())
                continue
            self._marks.popleft()
            await self._echo(name)

    async def events(self) -> AsyncIterator[WireEvent]:
        assert self._ws is not None
        loop = asyncio.get_running_loop()
        try:
            async for data in self._ws:
                if not isinstance(data, str):
                    continue
                t = loop.time()
                msg = json.loads(data)
                match msg.get("event"):
                    case "media":
                        pcm = mulaw.decode(base64.b64decode(msg["media"]["payload"]))
                        voiced = bool(pcm.size) and int(np.abs(pcm.astype(np.int32)).max()) > VOICED_LEVEL
                        self._playout_end = max(self._playout_end, t) + len(pcm) / RATE_HZ
                        yield ReplyAudio(t, None, len(pcm), RATE_HZ, voiced)
                    case "mark":
                        self._marks.append((max(self._playout_end, t), str(msg["mark"]["name"])))
                        self._marks_changed.set()
                    case "clear":
                        self._playout_end = t
                        pending = [name for _, name in self._marks]
                        self._marks.clear()
                        for name in pending:
                            await self._echo(name)
                        yield AudioCleared(t, None)
        except ConnectionClosed:
            pass
        self.close_info = close_text_of(self._ws)

    async def aclose(self) -> None:
        if self._echo_task is not None:
            await cancel_and_wait(self._echo_task)
            self._echo_task = None
        if self._ws is None:
            return
        stop = {"event": "stop", "sequenceNumber": "9", "stop": {}, "streamSid": self._sid}
        with contextlib.suppress(ConnectionClosed):
            await self._ws.send(json.dumps(stop))
        await self._ws.close()
