"""A TCP proxy for fault injection in front of a real server (e.g. the vLLM OpenAI server).

:class:`FaultProxy` listens on a loopback port and forwards every connection to the
upstream. Switch it at any time:

* :meth:`FaultProxy.refuse` -- stop listening (new connections are refused by the
  kernel, ECONNREFUSED) and reset the connections already open, like a crashed server;
* :meth:`FaultProxy.drop_after` -- close each connection once ``n`` more bytes of
  response have gone through it (a stream cut mid-reply);
* :meth:`FaultProxy.stall` -- stop forwarding in both directions; connections stay open
  and silent (a hung server, or a network black hole);
* :meth:`FaultProxy.hang_up` -- close the connection of each of the next ``n`` requests
  as it arrives, before any answer (a server closing an idle keep-alive connection just
  as the client sends on it); then plain forwarding;
* :meth:`FaultProxy.heal` -- back to plain forwarding (listening again on the same port;
  data held by a stall flows on).

Only asyncio streams; nothing here knows HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

CHUNK = 65536


class Mode(enum.StrEnum):
    PASS = "pass"
    REFUSE = "refuse"
    DROP = "drop"
    STALL = "stall"


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    #: response bytes forwarded since the last drop_after()
    down_bytes: int = 0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()


class FaultProxy:
    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        assert parts.hostname is not None and parts.port is not None, upstream_url
        self._upstream_url = parts
        self._host, self._port = parts.hostname, parts.port
        self.mode = Mode.PASS
        self._drop_after = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self.port = 0
        #: connections accepted so far
        self.accepted = 0
        self._hang_ups = 0
        #: requests hung up on so far (:meth:`hang_up`)
        self.hung_up = 0

    @property
    def url(self) -> str:
        """The upstream URL with the proxy's address (path kept, e.g. ``/v1``)."""
        return urlunsplit(self._upstream_url._replace(netloc=f"127.0.0.1:{self.port}"))

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    async def start(self) -> None:
        await self._listen()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    # ------------------------------------------------------------ faults

    async def refuse(self) -> None:
        self.mode = Mode.REFUSE
        await self._stop_listening()
        for conn in list(self._conns):
            conn.abort()

    def drop_after(self, n_bytes: int) -> None:
        self.mode = Mode.DROP
        self._drop_after = n_bytes
        for conn in self._conns:
            conn.down_bytes = 0

    def hang_up(self, n: int) -> None:
        self._hang_ups = n

    def stall(self) -> None:
        self.mode = Mode.STALL
        self._flowing.clear()

    async def heal(self) -> None:
        if self._server is None:
            await self._listen()
        self.mode = Mode.PASS
        self._flowing.set()

    async def aclose(self) -> None:
        await self._stop_listening()
        for conn in list(self._conns):
            conn.abort()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    # ------------------------------------------------------------ forwarding

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.accepted += 1
        conn = _Conn(writer)
        self._conns.add(conn)
        try:
            if self.mode is Mode.REFUSE:
                return
            try:
                up_reader, conn.upstream = await asyncio.open_connection(self._host, self._port)
            except OSError:
                return
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._pipe(conn, reader, conn.upstream, downstream=False))
                tg.create_task(self._pipe(conn, up_reader, writer, downstream=True))
        finally:
            self._conns.discard(conn)
            conn.abort()
            self._handlers.discard(task)

    async def _pipe(
        self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, downstream: bool
    ) -> None:
        try:
            while data := await reader.read(CHUNK):
                await self._flowing.wait()  # a stall holds the data (and stops reading more)
                if not downstream and self._hang_ups > 0:  # a request: hung up on, unanswered
                    self._hang_ups -= 1
                    self.hung_up += 1
                    return
                if downstream and self.mode is Mode.DROP:
                    allowed = self._drop_after - conn.down_bytes
                    if len(data) >= allowed:
                        writer.write(data[: max(0, allowed)])
                        with contextlib.suppress(ConnectionError):
                            await writer.drain()
                        conn.abort()
                        return
                writer.write(data)
                await writer.drain()
                if downstream:
                    conn.down_bytes += len(data)
        except ConnectionError:
            pass
        finally:
            conn.abort()  # one side is gone: so is the other
