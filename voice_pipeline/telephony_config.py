"""The ``telephony:`` section of the config (:class:`TelephonyConfig`) and its checks.

Apart from :mod:`voice_pipeline.config`, which re-exports both names, so that the
section can grow without the config module passing its size limit.

Who may call: ``/twilio`` admits a Media Stream signed by Twilio
(``X-Twilio-Signature``, keyed with ``twilio_auth_token``), or one carrying the
``twilio_token`` stream parameter; with neither credential configured it is open
only on a loopback server without ``server.auth_token``, or where
``allow_anonymous`` says so. AudioSocket has no credential at all: its peers are
``audiosocket_allowed_peers``, and an allow-list that admits every address needs
``allow_anonymous`` too.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from voice_pipeline.errors import ConfigError


@dataclass(frozen=True, slots=True)
class TelephonyConfig:
    """The phone edges ``voice-pipeline serve`` runs beside /ws: Twilio Media Streams on
    /twilio and Asterisk AudioSocket over TCP (docs/protocol.md, SECURITY.md)."""

    #: /twilio: the customParameters "token" a Media Stream must carry (None = no check)
    twilio_token: str | None = None
    #: /twilio: the Twilio account's auth token; set, every Media Stream handshake must carry
    #: a valid X-Twilio-Signature (HMAC-SHA1 of the stream's wss:// URL), else HTTP 403
    twilio_auth_token: str | None = None
    #: let /twilio take calls with neither credential above even when the server has a
    #: token or listens beyond loopback, and let audiosocket_allowed_peers admit everyone
    allow_anonymous: bool = False
    #: Asterisk AudioSocket calls on this TCP port (same host; None = off, 0 = any free)
    audiosocket_port: int | None = None
    #: AudioSocket peers allowed to connect (addresses or CIDR networks)
    audiosocket_allowed_peers: tuple[str, ...] = ("127.0.0.1/32", "::1/128")


def validate_telephony(t: TelephonyConfig) -> None:
    if t.audiosocket_port is not None and not 0 <= t.audiosocket_port <= 65535:
        raise ConfigError("telephony.audiosocket_port: must be 0..65535")
    key = "telephony.audiosocket_allowed_peers"
    for net in check_networks(key, t.audiosocket_allowed_peers):
        if net.prefixlen == 0 and not t.allow_anonymous:
            raise ConfigError(
                f"{key}: {net} lets any address call, and AudioSocket has no authentication; "
                "list your PBX's addresses, or set telephony.allow_anonymous: true"
            )


def check_networks(key: str, values: tuple[str, ...]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``values`` as networks; ConfigError naming ``key`` and the value that is not one."""
    out = []
    for peer in values:
        try:
            out.append(ipaddress.ip_network(peer, strict=False))
        except ValueError:
            raise ConfigError(f"{key}: {peer!r} is not an address or network") from None
    return out
