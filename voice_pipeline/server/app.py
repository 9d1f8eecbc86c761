"""The server of ``voice-pipeline serve``: one port, plain HTTP and the voice WebSocket.

Routes: ``/ws`` (the voice session, docs/protocol.md), ``/v1/realtime`` (the
OpenAI Realtime API, docs/realtime.md), ``/twilio``, ``/healthz`` (JSON),
``/metrics`` (Prometheus text), anything else a file of the static folder (the
demo page). The engines are loaded once by the caller and shared; every
connection gets its own connection object
(:class:`~voice_pipeline.server.connection.VoiceConnection`,
:class:`~voice_pipeline.realtime.connection.RealtimeConnection`, ...) and session.
Admission, in order: at the HTTP handshake, the client address (:mod:`.ratelimit`)
must not have opened ``max_new_sessions_per_ip_per_min`` sessions in the last
minute (else HTTP 429); on ``/ws`` and ``/v1/realtime`` with ``auth_token``
set, the token must match (else HTTP 401); on ``/twilio``, Twilio's signature must
be valid when ``telephony.twilio_auth_token`` is set, and a call with no credential
configured at all is refused on a server with a token or beyond loopback unless
``telephony.allow_anonymous`` (else HTTP 403; :mod:`~voice_pipeline.telephony.twilio_auth`);
then the Origin must be allowed (else
close 1008), the server must not be stopping (1001), and fewer than
``max_sessions`` may be connected, whatever the route (else 1013; a realtime
client gets an ``error`` event first) -- counted over every edge that shares
:attr:`VoiceServer.limit` (``serve`` gives it to its AudioSocket server too);
those already connected are never affected. With ``certfile``/``keyfile`` it
serves https/wss.

websockets' own DEBUG logging is never enabled on this server: it would write
request headers and URLs (the token) and frame contents (audio) to the log.

:meth:`VoiceServer.aclose` stops accepting, closes every connection with 1001,
waits for each session's ``aclose()`` and returns; closing the engines is the
caller's (they may outlive the server).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from voice_pipeline.access import parse_networks, token_ok
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config, ServerConfig
from voice_pipeline.cpu import this_cpu
from voice_pipeline.edge import SessionLimit
from voice_pipeline.engines import Engines
from voice_pipeline.errors import ConfigError
from voice_pipeline.realtime.connection import (
    MESSAGE_LIMIT_FACTOR,
    RealtimeConnection,
    refusal,
    server_profile,
)
from voice_pipeline.realtime.errors import ErrorCode
from voice_pipeline.realtime.session_config import ServerProfile
from voice_pipeline.server.connection import VoiceConnection
from voice_pipeline.server.metrics import CONTENT_TYPE, ServerMetrics
from voice_pipeline.server.protocol import PROTOCOL_VERSION
from voice_pipeline.server.ratelimit import RateLimiter, client_address, client_key
from voice_pipeline.server.web import (
    default_static_dir,
    json_response,
    origin_allowed,
    rate_limited_response,
    request_path,
    request_token,
    response,
    static_response,
    text_response,
    unauthorized_response,
)
from voice_pipeline.telephony.twilio_auth import SIGNATURE_HEADER, handshake_refusal
from voice_pipeline.telephony.twilio_connection import TwilioConnection
from voice_pipeline.tuning import choose

log = logging.getLogger(__name__)

WS_PATH = "/ws"
TWILIO_PATH = "/twilio"  # Twilio Media Streams (voice_pipeline.telephony)
REALTIME_PATH = "/v1/realtime"  # the OpenAI Realtime API (voice_pipeline.realtime)
#: the name each route's sessions are counted under in /metrics
ENDPOINTS = {WS_PATH: "ws", TWILIO_PATH: "twilio", REALTIME_PATH: "realtime"}
SHUTDOWN_REASON = "server shutting down"
#: why a /twilio handshake was refused (HTTP 403), by its sessions_refused reason
TWILIO_REFUSALS = {
    "signature": "no valid X-Twilio-Signature (telephony.twilio_auth_token)",
    "anonymous": "no credential configured for /twilio (telephony.twilio_auth_token or "
    "twilio_token), and this server has a token or listens beyond loopback",
}
#: seconds the closing handshake may take before the TCP connection is dropped
CLOSE_TIMEOUT_S = 2.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def server_ssl_context(s: ServerConfig) -> ssl.SSLContext | None:
    """TLS (TLS 1.2 or later) from ``certfile``/``keyfile``, or None; ConfigError if unusable."""
    if s.certfile is None or s.keyfile is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(s.certfile, s.keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"server.certfile/keyfile: cannot load {s.certfile} / {s.keyfile}: {exc}") from exc
    return ctx


def exposure_warnings(s: ServerConfig) -> list[str]:
    """What ``serve`` warns about when other machines can reach it."""
    if is_loopback(s.host):
        return []
    out = []
    if not s.auth_token:
        out.append(
            f"{s.host} is reachable from other machines and no token is set (--token): "
            "anyone who can reach the port can talk to the assistant and use this machine's CPU"
        )
    if s.certfile is None:
        out.append(
            f"{s.host} is reachable from other machines without TLS (--certfile/--keyfile): "
            "audio, transcripts and any token cross the network unencrypted"
        )
    return out


class _WireLogger(logging.LoggerAdapter[logging.Logger]):
    """websockets' logger without DEBUG: its debug lines carry request headers and URLs
    (a bearer or ``?token=`` token) and the first bytes of every frame (audio)."""

    def isEnabledFor(self, level: int) -> bool:
        return level > logging.DEBUG and self.logger.isEnabledFor(level)


class VoiceServer:
    def __init__(
        self,
        engines: Engines,
        cfg: Config,
        *,
        clock: Callable[[], int] = now_ns,
        realtime: ServerProfile | None = None,
    ) -> None:
        """``realtime``: what ``/v1/realtime`` announces (default: read from ``cfg`` and the
        TTS engine's voice)."""
        self._engines = engines
        self._cfg = cfg
        self._scfg = cfg.server
        self._clock = clock
        self.metrics = ServerMetrics()
        #: ``max_sessions`` over every edge of this server (AudioSocket's calls too), and its metrics
        self.limit = SessionLimit(self._scfg.max_sessions, self.metrics)
        self.static_dir = Path(self._scfg.static_dir) if self._scfg.static_dir else default_static_dir()
        self.connections: set[VoiceConnection | TwilioConnection | RealtimeConnection] = set()
        self.realtime_profile = realtime or server_profile(cfg, engines.tts.voice)
        self._server: Server | None = None
        self._started_ns = clock()
        self._stopping = False
        self._loopback_only = is_loopback(self._scfg.host)
        self._ssl = server_ssl_context(self._scfg)
        self._limiter = RateLimiter(self._scfg.max_new_sessions_per_ip_per_min)
        self._trusted_proxies = parse_networks(self._scfg.trusted_proxies)
        tuning = engines.tuning or choose(this_cpu(), cfg.llm, cfg.asr)
        #: what the figures of this server ran on (``machine`` in /healthz, so bench reports carry it)
        self.machine = tuning.as_dict()
        running = getattr(engines.llm, "settings", None)  # what the in-process engine runs with
        if isinstance(running, dict):
            self.machine["llm_dtype"] = running.get("dtype", self.machine["llm_dtype"])
            self.machine["llm_threads"] = running.get("threads", self.machine["llm_threads"])
            self.machine["kv_block_tokens"] = running.get("kv_block_tokens", self.machine["kv_block_tokens"])

    @property
    def max_realtime_message_bytes(self) -> int:
        """websockets' limit on ``/v1/realtime`` (raised at its handshake); events between
        ``max_realtime_event_bytes`` and this get an ``event_too_large`` error instead."""
        return MESSAGE_LIMIT_FACTOR * self._scfg.max_realtime_event_bytes

    @property
    def max_message_bytes(self) -> int:
        """websockets' own limit: bigger messages close the connection with 1009. Frames
        between ``max_frame_bytes`` and this get a ``frame_too_large`` error instead."""
        return max(4 * self._scfg.max_frame_bytes, 65536)

    async def start(self) -> None:
        s = self._scfg
        self._server = await serve(
            self._handle,
            s.host,
            s.port,
            ssl=self._ssl,
            logger=_WireLogger(logging.getLogger("websockets.server"), {}),
            process_request=self._process_request,
            max_size=self.max_message_bytes,
            ping_interval=s.ping_interval_s or None,
            ping_timeout=s.ping_timeout_s or None,
            compression=None,  # PCM barely compresses; deflate would only cost CPU
            # a client that stopped reading never sees our close frame (it waits behind the
            # data it did not read): drop its TCP connection this soon instead of after 10 s
            close_timeout=CLOSE_TIMEOUT_S,
            server_header="voice-pipeline",
        )

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        host = self._scfg.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self._ssl else 'http'}://{host}:{self.port}/"

    # ------------------------------------------------------------ plain HTTP

    def health(self) -> dict[str, Any]:
        """``status``: "ok"; "degraded" (still HTTP 200) while the LLM is failing, with a
        ``reason``; "stopping" (503) during shutdown. ``llm`` has the LLM's health."""
        llm = self._engines.llm.health()
        status = "stopping" if self._stopping else "ok" if llm.ok else "degraded"
        body: dict[str, Any] = {
            "status": status,
            "protocol_version": PROTOCOL_VERSION,
            "sessions_active": self.limit.active,
            "max_sessions": self._scfg.max_sessions,
            "uptime_s": round((self._clock() - self._started_ns) / 1e9, 1),
            "llm": {
                "ok": llm.ok,
                "reason": llm.reason,
                "failures": llm.failures,
                "retry_in_s": llm.retry_in_s,
            },
            "machine": self.machine,
        }
        if not llm.ok:
            body["reason"] = f"llm: {llm.reason}"
        return body

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request_path(request.path)
        if path in ENDPOINTS:
            return self._admit(connection, request, path)  # the rest of admission is in _handle
        if path == "/healthz":
            return json_response(503 if self._stopping else 200, self.health())
        if path == "/metrics":
            return response(200, self.metrics.render().encode(), CONTENT_TYPE)
        return static_response(self.static_dir, request.path)

    def _admit(self, connection: ServerConnection, request: Request, path: str) -> Response | None:
        """At the handshake: the per-address rate limit, then the /ws token. None = go on."""
        peer = str(connection.remote_address[0]) if connection.remote_address else ""
        forwarded = ",".join(request.headers.get_all("X-Forwarded-For")) or None
        client = client_address(peer, forwarded, self._trusted_proxies)
        admission = self._limiter.admit(client_key(client), self._clock())
        if not admission.allowed:
            self.metrics.session_refused("rate")
            log.warning("refused a new session from %s: rate limited", client)
            return rate_limited_response(admission.retry_after_s)
        if path in (WS_PATH, REALTIME_PATH):
            given = request_token(request.headers.get("Authorization"), request.path)
            if not token_ok(given, self._scfg.auth_token):
                self.metrics.session_refused("auth")
                log.warning("refused a session from %s: %s token", client, "no" if given is None else "bad")
                return unauthorized_response()
        if path == TWILIO_PATH and (refused := self._twilio_refusal(request)):
            self.metrics.session_refused(refused)
            log.warning("refused a /twilio call from %s: %s", client, TWILIO_REFUSALS[refused])
            return text_response(403, f"403 Forbidden: {TWILIO_REFUSALS[refused]}\n")
        if path == REALTIME_PATH:  # base64 audio events: a larger limit than /ws frames
            connection.protocol.max_message_size = self.max_realtime_message_bytes
        return None

    def _twilio_refusal(self, request: Request) -> str | None:
        guarded = bool(self._scfg.auth_token) or not self._loopback_only
        headers = request.headers
        return handshake_refusal(
            self._cfg.telephony,
            guarded=guarded,
            signature=headers.get(SIGNATURE_HEADER),
            host=headers.get("Host"),
            target=request.path,
        )

    # ------------------------------------------------------------ voice sessions

    async def _refuse(self, ws: ServerConnection, realtime: bool, code: int, reason: str) -> None:
        if realtime:  # the protocol's error event first: the SDKs surface it, a close code less so
            kind = ErrorCode.SESSION_LIMIT if code == 1013 else ErrorCode.REFUSED
            await ws.send(refusal(kind, reason))
        await ws.close(code, reason)

    async def _handle(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        headers = ws.request.headers
        path = request_path(ws.request.path)
        realtime = path == REALTIME_PATH
        origin = headers.get("Origin")
        if not origin_allowed(origin, headers.get("Host"), self._scfg.allowed_origins, self._loopback_only):
            self.metrics.session_refused("origin")
            log.warning("refused a connection from origin %r", origin)
            await self._refuse(ws, realtime, 1008, "origin not allowed")
            return
        if self._stopping:
            await self._refuse(ws, realtime, 1001, SHUTDOWN_REASON)
            return
        if not self.limit.acquire():
            limit = f"session limit reached ({self._scfg.max_sessions}); try again later"
            await self._refuse(ws, realtime, 1013, limit)
            return
        try:
            conn: VoiceConnection | TwilioConnection | RealtimeConnection
            if realtime:
                conn = RealtimeConnection(
                    ws, self._engines, self._cfg, self.metrics, self.realtime_profile, clock=self._clock
                )
            else:
                conn = (TwilioConnection if path == TWILIO_PATH else VoiceConnection)(
                    ws, self._engines, self._cfg, self.metrics, clock=self._clock
                )
            self.metrics.endpoint_opened(ENDPOINTS[path])
            self.connections.add(conn)
            try:
                await conn.run()
            finally:
                self.connections.discard(conn)
        finally:
            self.limit.release()

    async def aclose(self) -> None:
        """Close every session with 1001 and stop serving. Idempotent."""
        if self._server is None:
            return
        self._stopping = True
        self._server.close(close_connections=False)  # stop accepting; 503 to handshakes under way
        await asyncio.gather(*(conn.close(1001, SHUTDOWN_REASON) for conn in list(self.connections)))
        await self._server.wait_closed()
        for conn in list(self.connections):  # handlers have returned; belt and braces
            await conn.aclose()
