"""The ``server:`` section of the config (:class:`ServerConfig`) and its checks.

Apart from :mod:`voice_pipeline.config`, which re-exports both names (as it does the
``telephony:`` and ``dialogue:`` sections), so that the config module stays small.
"""

from __future__ import annotations

from dataclasses import dataclass

from voice_pipeline.errors import ConfigError
from voice_pipeline.telephony_config import check_networks


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """``voice-pipeline serve``: the WebSocket server (see docs/protocol.md)."""

    #: address to bind; the default serves this machine only
    host: str = "127.0.0.1"
    port: int = 8765
    #: concurrent voice sessions (/ws, /v1/realtime, /twilio and AudioSocket calls together);
    #: one more is refused (WebSocket close code 1013; an AudioSocket call is hung up)
    max_sessions: int = 2
    #: Origin values allowed to open /ws and /v1/realtime ("*" = any). Empty = same origin as
    #: the Host header (and, when bound to a loopback address, a loopback Host: no DNS rebinding)
    allowed_origins: tuple[str, ...] = ()
    #: largest binary audio frame accepted (bytes); larger ones get a frame_too_large error
    max_frame_bytes: int = 32768
    #: /v1/realtime: largest client event accepted (bytes of JSON; base64 audio is 4/3 of
    #: its bytes: 1 MiB is ~16 s of 24 kHz PCM16); larger ones get an event_too_large error,
    #: and messages over 4x this close the connection (1009)
    max_realtime_event_bytes: int = 1048576
    #: a session that sends no audio for this long is closed
    idle_timeout_s: float = 60.0
    #: websockets keepalive: ping this often, close if no pong within ping_timeout_s (0 = off)
    ping_interval_s: float = 20.0
    ping_timeout_s: float = 20.0
    #: server events queued for a client that is not reading before it is disconnected
    max_queued_events: int = 1024
    #: reply audio queued for a client that is not reading before the reply waits (seconds)
    max_queued_audio_s: float = 2.0
    #: drain waits this long beyond the audio's own duration for the listener to finish it
    drain_grace_s: float = 2.0
    #: folder served at /; None = the demo page bundled in clients/static
    static_dir: str | None = None
    #: /ws and /v1/realtime: if set, a client must send ``Authorization: Bearer <token>`` (the
    #: openai SDK sends its api_key so) or ``?token=``, else HTTP 401 at the handshake
    #: (compared in constant time; never logged)
    auth_token: str | None = None
    #: serve https/wss with this certificate chain and private key (PEM); the AudioSocket
    #: listener stays plain TCP
    certfile: str | None = None
    keyfile: str | None = None
    #: new sessions (/ws, /v1/realtime, /twilio) one client address (IPv6: its /64) may open
    #: per minute (0 = no limit); more are refused with HTTP 429 at the handshake
    max_new_sessions_per_ip_per_min: int = 30
    #: reverse proxies (addresses or CIDR networks) whose X-Forwarded-For names the client
    trusted_proxies: tuple[str, ...] = ()


def validate_server(s: ServerConfig) -> None:
    if not 0 <= s.port <= 65535:
        raise ConfigError("server.port: must be 0..65535")
    if s.max_sessions < 1:
        raise ConfigError("server.max_sessions: must be >= 1")
    if s.max_frame_bytes < 2:
        raise ConfigError("server.max_frame_bytes: must be >= 2")
    if s.max_realtime_event_bytes < 1024:
        raise ConfigError("server.max_realtime_event_bytes: must be >= 1024")
    if s.idle_timeout_s <= 0 or s.drain_grace_s < 0 or s.max_queued_audio_s <= 0:
        raise ConfigError("server: idle_timeout_s and max_queued_audio_s must be > 0, drain_grace_s >= 0")
    if s.ping_interval_s < 0 or s.ping_timeout_s < 0:
        raise ConfigError("server: ping_interval_s and ping_timeout_s must be >= 0 (0 = off)")
    if s.max_queued_events < 16:
        raise ConfigError("server.max_queued_events: must be >= 16")
    if s.max_new_sessions_per_ip_per_min < 0:
        raise ConfigError("server.max_new_sessions_per_ip_per_min: must be >= 0 (0 = no limit)")
    if (s.certfile is None) != (s.keyfile is None):
        raise ConfigError("server: certfile and keyfile go together (TLS needs both)")
    check_networks("server.trusted_proxies", s.trusted_proxies)
