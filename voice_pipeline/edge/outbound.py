"""One connection's outbound queue and the one task that writes it to the socket.

Everything the server sends goes through here, in order: session events and
errors (:meth:`Outbound.send_text`, never blocks) and reply audio
(:meth:`Outbound.put_audio`: a JSON ``assistant.audio`` header, then its binary
frame; on ``/v1/realtime`` one text frame, a ``response.output_audio.delta``). The
queue is bounded, so a client that stops reading cannot grow the
server's memory:

* audio: at most ``max_audio_samples`` queued; :meth:`wait_audio_room` makes the
  reply wait (backpressure on TTS) until the writer has made room;
* events: at most ``max_events`` queued; one more means the client has stopped
  reading: the queue is dropped, nothing more is queued, and the connection is
  closed with 1008 (policy) and the reason ``client not reading``. (A client that
  stops reading also stops answering pings, so keepalive closes it too.)

Below the queue, what one connection can hold is bounded too: the writer sends one
item at a time, and websockets' ``send`` waits while its write buffer is over
``write_limit`` (32 KiB by default, plus the frame being written); the kernel's
socket send buffer is fixed at :data:`SEND_BUFFER_BYTES` by :func:`bound_send_buffer`
(Linux autotunes it up to 4 MiB otherwise). :attr:`Outbound.queued_bytes` is what the
queue holds now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from websockets.exceptions import ConnectionClosed

from voice_pipeline.clock import now_ns

log = logging.getLogger(__name__)

OVERFLOW_CLOSE_CODE = 1008
#: kernel send buffer of a client's socket (Linux doubles it for bookkeeping): ~128 KiB
#: is > 1 s of 48 kHz audio, enough to keep a listener fed at any sane round-trip time
SEND_BUFFER_BYTES = 64 * 1024


def bound_send_buffer(transport: asyncio.BaseTransport) -> None:
    """Fix the socket's kernel send buffer at :data:`SEND_BUFFER_BYTES` (no autotuning)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)


OVERFLOW_REASON = "client not reading: outbound queue full"


class Socket(Protocol):
    """The part of ``websockets.asyncio.server.ServerConnection`` used here."""

    async def send(self, message: str | bytes) -> None: ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...


@dataclass(frozen=True, slots=True)
class _Text:
    data: str


@dataclass(frozen=True, slots=True)
class _Audio:
    turn_id: int
    header: str | None  # sent first (None: the payload is the whole message)
    pcm: bytes | str
    samples: int


class Outbound:
    def __init__(
        self,
        ws: Socket,
        *,
        max_events: int,
        max_audio_samples: int,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        self._ws = ws
        self._max_events = max_events
        self.max_audio_samples = max_audio_samples
        #: called with (turn_id, samples, t_ns) as each audio frame is written
        self.on_audio_sent: Callable[[int, int, int], None] = lambda turn, samples, t_ns: None
        self._clock = clock
        self._queue: deque[_Text | _Audio] = deque()
        self._events = 0  # _Text items queued
        self._bytes = 0  # payload bytes queued
        self._audio: dict[int, int] = {}  # turn -> samples queued
        self._wake = asyncio.Event()  # something to write
        self._progress = asyncio.Event()  # replaced on every change; waiters hold the old one
        self._writer: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None
        self.closed = False  # nothing more is written
        self.overflowed = False

    def start(self) -> None:
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write(), name="ws-writer")

    # ------------------------------------------------------------ producers

    def send_text(self, data: str) -> None:
        """Queue a text frame. Never blocks; see the module docstring for a full queue."""
        if self.closed:
            return
        if self._events >= self._max_events:
            self._overflow()
            return
        self._queue.append(_Text(data))
        self._events += 1
        self._bytes += len(data)
        self._wake.set()

    @property
    def events_queued(self) -> int:
        return self._events

    @property
    def queued_bytes(self) -> int:
        """Bytes of text and audio frames waiting for the writer."""
        return self._bytes

    @property
    def audio_queued(self) -> int:
        return sum(self._audio.values())

    def audio_queued_for(self, turn_id: int) -> int:
        return self._audio.get(turn_id, 0)

    async def wait_audio_room(self) -> None:
        """Return once audio may be queued (or nothing more will be written)."""
        while not self.closed and self.audio_queued >= self.max_audio_samples:
            await self.changed()

    def put_audio(self, turn_id: int, header: str | None, pcm: bytes | str, samples: int) -> None:
        """Queue ``samples`` of reply audio: ``header`` (if any), then ``pcm`` (a binary frame,
        or a text frame that carries the audio itself)."""
        if self.closed:
            return
        item = _Audio(turn_id, header, pcm, samples)
        self._queue.append(item)
        self._audio[turn_id] = self._audio.get(turn_id, 0) + samples
        self._bytes += _size(item)
        self._wake.set()

    def drop_audio(self, turn_id: int) -> int:
        """Remove ``turn_id``'s queued audio; return how many samples were dropped."""
        dropped = self._audio.pop(turn_id, 0)
        if dropped:
            self._queue = deque(
                i for i in self._queue if not (isinstance(i, _Audio) and i.turn_id == turn_id)
            )
            self._bytes = sum(_size(i) for i in self._queue)
            self._notify()
        return dropped

    # ------------------------------------------------------------ progress

    def _notify(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    def notify(self) -> None:
        """Wake everyone waiting in :meth:`changed` (e.g. a playback report arrived)."""
        self._notify()

    async def changed(self, timeout_s: float | None = None) -> None:
        """Wait until something was written, dropped or reported (or ``timeout_s``)."""
        event = self._progress
        if timeout_s is None:
            await event.wait()
            return
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass

    # ------------------------------------------------------------ writer

    async def _write(self) -> None:
        try:
            while True:
                while not self._queue:
                    self._wake.clear()
                    await self._wake.wait()
                item = self._queue.popleft()
                self._bytes -= _size(item)
                if isinstance(item, _Text):
                    self._events -= 1
                    await self._ws.send(item.data)
                else:
                    self._audio[item.turn_id] -= item.samples
                    if not self._audio[item.turn_id]:
                        del self._audio[item.turn_id]
                    self.on_audio_sent(item.turn_id, item.samples, self._clock())
                    if item.header is not None:
                        await self._ws.send(item.header)
                    await self._ws.send(item.pcm)
                self._notify()
        except ConnectionClosed:
            pass
        finally:
            self._stop()

    def _stop(self) -> None:
        self.closed = True
        self._queue.clear()
        self._events = 0
        self._bytes = 0
        self._audio.clear()
        self._notify()

    def _overflow(self) -> None:
        log.warning("closing a connection whose client stopped reading (%d events queued)", self._events)
        self.overflowed = True
        self._stop()
        if self._writer is not None:
            self._writer.cancel()
        self._closer = asyncio.get_running_loop().create_task(
            self._ws.close(OVERFLOW_CLOSE_CODE, OVERFLOW_REASON), name="ws-overflow-close"
        )

    async def aclose(self) -> None:
        """Stop writing (what is still queued is dropped). Idempotent."""
        self._stop()
        tasks = [t for t in (self._writer, self._closer) if t is not None]
        if self._writer is not None:
            self._writer.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _size(item: _Text | _Audio) -> int:
    return len(item.data) if isinstance(item, _Text) else len(item.header or "") + len(item.pcm)
