"""Plain HTTP answers of the server: static files, ``/healthz``, ``/metrics``.

:func:`resolve_static` maps a request path to a file inside the static folder or
to nothing: the path is percent-decoded once, and any ``.``/``..`` segment, any
hidden (dot) name, backslash or NUL, and anything that resolves (symlinks
included) outside the folder is not found. A double-encoded ``%252e%252e`` decodes
once to the literal name ``%2e%2e``, which is looked up as such (and not found).

:func:`request_token` reads the ``/ws`` bearer token (``server.auth_token``; it is
checked by :func:`voice_pipeline.access.token_ok`); :func:`origin_allowed` is the
Origin rule.
"""

from __future__ import annotations

import email.utils
import http
import json
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Response

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".wasm": "application/wasm",
    ".txt": "text/plain; charset=utf-8",
    ".wav": "audio/wav",
}


def default_static_dir() -> Path:
    """The demo page shipped in the ``clients`` package."""
    return Path(str(resources.files("clients"))) / "static"


def request_path(target: str) -> str:
    """The path of a request target, without query or fragment (not decoded)."""
    if not target.startswith("/"):  # absolute-form (http://host/path) or garbage
        target = urlsplit(target).path
    return target.split("?", 1)[0].split("#", 1)[0] or "/"


def resolve_static(root: Path, target: str) -> Path | None:
    """The file under ``root`` that ``target`` names, or None (404)."""
    try:
        path = unquote(request_path(target), errors="strict")
    except UnicodeDecodeError:
        return None
    if "\\" in path or "\x00" in path:
        return None
    parts = [p for p in path.split("/") if p]
    if any(p.startswith(".") for p in parts):  # ".", "..", and hidden files
        return None
    candidate = root.joinpath(*parts)
    if candidate.is_dir():
        candidate = candidate / "index.html"
    try:
        resolved = candidate.resolve(strict=True)
        base = root.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not resolved.is_relative_to(base) or not resolved.is_file():
        return None
    return resolved


def content_type(path: Path) -> str:
    return CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream")


def response(status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> Response:
    code = http.HTTPStatus(status)
    headers = Headers(
        [
            ("Date", email.utils.formatdate(usegmt=True)),
            ("Connection", "close"),
            ("Content-Length", str(len(body))),
            ("Content-Type", ctype),
            ("Cache-Control", "no-cache"),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "no-referrer"),  # a page opened as /?token=... leaks it nowhere
        ]
    )
    for key, value in (extra or {}).items():
        headers[key] = value
    return Response(code.value, code.phrase, headers, body)


def text_response(status: int, text: str) -> Response:
    return response(status, text.encode(), "text/plain; charset=utf-8")


def json_response(status: int, doc: dict[str, Any]) -> Response:
    return response(status, json.dumps(doc).encode(), "application/json")


def static_response(root: Path, target: str) -> Response:
    path = resolve_static(root, target)
    if path is None:
        return text_response(404, "404 Not Found\n")
    try:
        body = path.read_bytes()
    except OSError:
        return text_response(404, "404 Not Found\n")
    return response(200, body, content_type(path))


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def origin_allowed(
    origin: str | None, host: str | None, allowed: tuple[str, ...], loopback_only: bool
) -> bool:
    """May a WebSocket with this ``Origin`` (and ``Host``) header open a session?

    No Origin: not a browser, so no cross-site page is involved: allowed. With a
    configured list: exactly one of its entries (``"*"`` = any). Without one: the
    same origin as the Host header -- and when the server is bound to a loopback
    address, only a loopback host name, so a DNS-rebinding page is refused too.
    """
    if origin is None:
        return True
    if allowed:
        return "*" in allowed or origin.rstrip("/") in {a.rstrip("/") for a in allowed}
    if host is None:
        return False
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.lower():
        return False
    return not loopback_only or (parts.hostname or "") in LOOPBACK_NAMES


TOKEN_PARAMETER = "token"


def request_token(authorization: str | None, target: str) -> str | None:
    """The token a WebSocket handshake carries, or None.

    ``Authorization: Bearer <token>`` if that header is present (another scheme
    gives ``""``, which matches no token), else the ``token`` query parameter of
    the request target (browsers cannot set headers on a WebSocket).
    """
    if authorization is not None:
        scheme, _, value = authorization.strip().partition(" ")
        return value.strip() if scheme.lower() == "bearer" else ""
    query = target.split("#", 1)[0].partition("?")[2]
    values = parse_qs(query, errors="replace").get(TOKEN_PARAMETER)
    return values[-1] if values else None


def unauthorized_response() -> Response:
    return response(
        401,
        b"401 Unauthorized: a valid token is required\n",
        "text/plain; charset=utf-8",
        {"WWW-Authenticate": 'Bearer realm="voice-pipeline"'},
    )


def rate_limited_response(retry_after_s: int) -> Response:
    return response(
        429,
        b"429 Too Many Requests: too many new sessions from your address\n",
        "text/plain; charset=utf-8",
        {"Retry-After": str(retry_after_s)},
    )
