"""A client's connection to a voice-pipeline server: one place for what can go wrong.

:func:`connect` opens a WebSocket (``/ws``, or ``/twilio`` for the bench), with a token
as ``Authorization: Bearer``, and turns every way the handshake fails into one of the
errors below; :func:`start_session` sends ``start`` and waits for ``ready``
(:func:`open_session`: both); :func:`close_text` and :func:`close_text_of` say how a
connection closed. Used by ``voice-pipeline talk`` (clients/) and ``voice-pipeline bench``.

Errors (the messages name the URL; ``retryable``: may trying again later help)::

    ServerSessionError          a VoicePipelineError; itself: not a WebSocket URL
    ├── ServerUnreachableError  nothing answers at the URL (connection refused, DNS, timeout)
    ├── SessionRefusedError     the server refused the connection (``code``: the HTTP status, e.g.
    │                           401 token, 429 rate limit) or the session (``code``: the close
    │                           code, e.g. 1013 session limit, 1008 origin; None: an ``error``
    │                           answer to ``start`` (not retryable) or no ``ready`` in time)
    └── SessionDroppedError     a running session's connection closed or was lost (``code``)
"""

from __future__ import annotations

import asyncio

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from voice_pipeline.errors import VoicePipelineError
from voice_pipeline.wire.client_messages import Start
from voice_pipeline.wire.server_messages import ErrorReported, Ready, parse_server_message

#: for the handshake, and again for ``ready`` after ``start``
OPEN_TIMEOUT_S = 10.0

#: what a refused handshake's HTTP status means, said after it
_HINTS = {
    401: " (wrong or missing token: --token)",
    403: " (forbidden)",
    404: " (wrong path?)",
    429: " (rate limited: the server's limit of new sessions per client address per minute, "
    "server.max_new_sessions_per_ip_per_min; try again later)",
}


class ServerSessionError(VoicePipelineError):
    """A client could not reach the server, start a session, or keep it."""

    def __init__(self, message: str, code: int | None = None, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class ServerUnreachableError(ServerSessionError):
    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


class SessionRefusedError(ServerSessionError):
    def __init__(self, message: str, code: int | None = None, *, retryable: bool = True) -> None:
        super().__init__(message, code, retryable=retryable)


class SessionDroppedError(ServerSessionError):
    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message, code, retryable=True)


def close_text(exc: ConnectionClosed) -> str:
    if exc.rcvd is None:
        return "connection lost without a close frame"
    return f"closed with {exc.rcvd.code}: {exc.rcvd.reason or '(no reason)'}"


def close_text_of(ws: ClientConnection) -> str:
    """How ``ws`` closed (once it has)."""
    if ws.close_code is None:
        return "connection lost without a close frame"
    return f"closed with {ws.close_code}: {ws.close_reason or '(no reason)'}"


def dropped(exc: ConnectionClosed) -> SessionDroppedError:
    return SessionDroppedError(close_text(exc), exc.rcvd.code if exc.rcvd is not None else None)


async def connect(
    url: str, token: str | None = None, *, open_timeout_s: float = OPEN_TIMEOUT_S
) -> ClientConnection:
    """Open the WebSocket, or raise the :class:`ServerSessionError` that says why not."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        return await ws_connect(
            url, additional_headers=headers, compression=None, max_size=None, open_timeout=open_timeout_s
        )
    except InvalidURI as exc:
        raise ServerSessionError(f"not a WebSocket URL: {url}") from exc
    except InvalidStatus as exc:
        status = exc.response.status_code
        raise SessionRefusedError(
            f"the server at {url} refused the connection: HTTP {status}{_HINTS.get(status, '')}", status
        ) from exc
    except InvalidHandshake as exc:
        raise SessionRefusedError(f"the server at {url} refused the connection: {exc}") from exc
    except (OSError, TimeoutError) as exc:
        raise ServerUnreachableError(f"server not reachable at {url}: {exc or 'timed out'}") from exc


async def start_session(
    ws: ClientConnection, start: Start, url: str, *, timeout_s: float = OPEN_TIMEOUT_S
) -> Ready:
    """Send ``start`` and return the server's ``ready`` (the connection is closed if none comes)."""
    try:
        await ws.send(start.serialize())
        async with asyncio.timeout(timeout_s):
            while True:
                data = await ws.recv()
                if not isinstance(data, str):
                    continue
                msg = parse_server_message(data)
                if isinstance(msg, Ready):
                    return msg
                if isinstance(msg, ErrorReported):
                    raise SessionRefusedError(
                        f"the server at {url} refused the session: {msg.code}: {msg.message}", retryable=False
                    )
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd is not None else None
        await ws.close()
        raise SessionRefusedError(
            f"the server at {url} refused the session: {close_text(exc)}", code
        ) from exc
    except TimeoutError as exc:
        await ws.close()
        raise SessionRefusedError(f"no 'ready' from {url} within {timeout_s:g} s") from exc
    except Exception:
        await ws.close()
        raise


async def open_session(url: str, start: Start, token: str | None = None) -> tuple[ClientConnection, Ready]:
    """:func:`connect` and :func:`start_session`: the connection and its ``ready``."""
    ws = await connect(url, token)
    return ws, await start_session(ws, start, url)
