"""Who may open ``/twilio``: Twilio's request signature and the anonymous-call rule. Pure.

Twilio signs the WebSocket handshake of a Media Stream like any webhook request
(twilio.com/docs/usage/webhooks/webhooks-security): ``X-Twilio-Signature`` is the
base64 of the HMAC-SHA1, keyed with the account's auth token, of the full URL it
requested followed by each POST parameter's name and value in name order (a
handshake is a GET: the URL alone). Media Streams connect to ``wss://`` URLs
only, without a query string, so the URL is rebuilt as ``wss://`` + the ``Host``
header + the request target; like Twilio's own validators, with and without the
default port ``:443``. A TLS proxy in front must pass the ``Host`` header on.

:func:`twilio_access` says which credential ``/twilio`` asks for;
:func:`handshake_refusal` decides one handshake.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
from collections.abc import Mapping

from voice_pipeline.access import token_ok
from voice_pipeline.telephony_config import TelephonyConfig

SIGNATURE_HEADER = "X-Twilio-Signature"


class TwilioAccess(enum.StrEnum):
    """What a ``/twilio`` caller must show."""

    SIGNED = "signed"  # a valid X-Twilio-Signature (telephony.twilio_auth_token)
    TOKEN = "token"  # the stream's "token" parameter, checked at its start message
    ANONYMOUS = "anonymous"  # nothing: a loopback server without a token, or allow_anonymous
    CLOSED = "closed"  # nothing would do: refused until a credential is configured


def twilio_access(t: TelephonyConfig, *, guarded: bool) -> TwilioAccess:
    """``guarded``: the server has ``server.auth_token`` or listens beyond loopback."""
    if t.twilio_auth_token:
        return TwilioAccess.SIGNED
    if t.twilio_token:
        return TwilioAccess.TOKEN
    if t.allow_anonymous or not guarded:
        return TwilioAccess.ANONYMOUS
    return TwilioAccess.CLOSED


def twilio_signature(auth_token: str, url: str, params: Mapping[str, str] | None = None) -> str:
    """The ``X-Twilio-Signature`` Twilio sends for a request to ``url`` with these POST
    parameters (None for a GET)."""
    data = url + "".join(name + value for name, value in sorted((params or {}).items()))
    digest = hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def signed_urls(host: str, target: str) -> list[str]:
    """The URLs Twilio may have signed for a handshake to ``host`` (the Host header) and
    ``target`` (path and query as requested)."""
    bare = host.removesuffix(":443")  # an IPv6 address in a Host header is in brackets
    return [f"wss://{bare}{target}", f"wss://{bare}:443{target}"]


def signature_ok(auth_token: str, signature: str | None, host: str | None, target: str) -> bool:
    """Does ``signature`` match one of :func:`signed_urls`? Constant time per URL."""
    if not signature or not host:
        return False
    return any(token_ok(signature, twilio_signature(auth_token, url)) for url in signed_urls(host, target))


def handshake_refusal(
    t: TelephonyConfig, *, guarded: bool, signature: str | None, host: str | None, target: str
) -> str | None:
    """Why this ``/twilio`` handshake is refused (the ``sessions_refused`` reason), or None."""
    match twilio_access(t, guarded=guarded):
        case TwilioAccess.SIGNED:
            assert t.twilio_auth_token
            return None if signature_ok(t.twilio_auth_token, signature, host, target) else "signature"
        case TwilioAccess.CLOSED:
            return "anonymous"
        case _:
            return None
