"""What ``voice-pipeline serve`` prints at start: each endpoint, and who may use it. Pure.

One line per endpoint, read from the same config the admission checks read
(:mod:`voice_pipeline.server.app`, :mod:`voice_pipeline.telephony.twilio_auth`,
the AudioSocket allow-list), so the summary cannot say "open" where the server
refuses or the reverse.
"""

from __future__ import annotations

from voice_pipeline.config import Config
from voice_pipeline.server.app import is_loopback
from voice_pipeline.telephony.twilio_auth import TwilioAccess, twilio_access


def endpoint_summary(cfg: Config, audiosocket_port: int | None = None) -> list[str]:
    """``audiosocket_port``: the port AudioSocket listens on (None = not listening)."""
    s, t = cfg.server, cfg.telephony
    loopback = is_loopback(s.host)
    reach = "this machine only" if loopback else f"any machine that can reach {s.host}"
    voice = "with the token (--token)" if s.auth_token else "no token needed"
    twilio = {
        TwilioAccess.SIGNED: "calls signed by Twilio (X-Twilio-Signature, telephony.twilio_auth_token)"
        + (" that carry the stream token" if t.twilio_token else ""),
        TwilioAccess.TOKEN: "streams that carry the token parameter (telephony.twilio_token)",
        TwilioAccess.ANONYMOUS: "anyone, no credential"
        + (" (telephony.allow_anonymous)" if t.allow_anonymous else ""),
        TwilioAccess.CLOSED: "nobody: refused (HTTP 403) until telephony.twilio_auth_token or "
        "twilio_token is set (or telephony.allow_anonymous: true)",
    }[twilio_access(t, guarded=bool(s.auth_token) or not loopback)]
    lines = [
        f"  /ws, /v1/realtime: {reach}; {voice}",
        f"  /twilio: {reach}; {twilio}",
        f"  /, /healthz, /metrics: {reach}; no token needed",
    ]
    if audiosocket_port is not None:
        peers = t.audiosocket_allowed_peers
        anyone = any(p.endswith("/0") for p in peers)  # validated: only with allow_anonymous
        who = "any peer (telephony.allow_anonymous)" if anyone else f"peers {', '.join(peers) or 'none'} only"
        where = f"[{s.host}]:{audiosocket_port}" if ":" in s.host else f"{s.host}:{audiosocket_port}"
        lines.append(f"  AudioSocket (TCP {where}): {who}; plain TCP, no authentication")
    return ["endpoints, and who may use them:", *lines]
