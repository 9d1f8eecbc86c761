"""Static files (no way out of the folder), content types, the Origin rule and the /ws
token rule (pure)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from voice_pipeline.access import token_ok
from voice_pipeline.server.app import is_loopback
from voice_pipeline.server.web import (
    content_type,
    default_static_dir,
    origin_allowed,
    rate_limited_response,
    request_token,
    resolve_static,
    static_response,
    unauthorized_response,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    static = tmp_path / "static"
    (static / "sub").mkdir(parents=True)
    (static / "index.html").write_text("<html>home</html>")
    (static / "app.js").write_text("1")
    (static / "sub" / "index.html").write_text("<html>sub</html>")
    (static / "sub" / "a b.css").write_text("x")
    (static / ".secret").write_text("hidden")
    (tmp_path / "outside.txt").write_text("secret")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "index.html").write_text("secret page")
    (tmp_path / "elsewhere" / "key.pem").write_text("secret key")
    (static / "%2e%2e").mkdir()  # a folder literally named like an encoded ".."
    (static / "%2e%2e" / "ok.txt").write_text("literal")
    os.symlink(tmp_path / "outside.txt", static / "link.txt")
    os.symlink(tmp_path / "elsewhere", static / "linkdir")  # a symlinked folder pointing outside
    os.symlink("/etc", static / "etc")
    return static


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("/", "index.html"),
        ("/index.html", "index.html"),
        ("/app.js?v=3", "app.js"),
        ("/app.js#x", "app.js"),
        ("//app.js", "app.js"),
        ("/sub/", "sub/index.html"),
        ("/sub", "sub/index.html"),
        ("/sub/a%20b.css", "sub/a b.css"),
        ("/%252e%252e/ok.txt", "%2e%2e/ok.txt"),  # decoded once: a literal name, still inside
    ],
)
def test_files_inside_are_found(root: Path, target: str, name: str) -> None:
    assert resolve_static(root, target) == (root / name).resolve()


@pytest.mark.parametrize(
    "target",
    [
        "/../outside.txt",
        "/%2e%2e/outside.txt",
        "/%2E%2E/outside.txt",
        "/..%2foutside.txt",
        "/sub/../../outside.txt",
        "/sub/%2e%2e/%2e%2e/outside.txt",
        "/..\\outside.txt",
        "/%5c..%5coutside.txt",
        "/./index.html",
        "/.secret",
        "/link.txt",  # a symlink pointing outside
        "/linkdir/",  # a symlinked folder pointing outside
        "/linkdir/index.html",
        "/linkdir/key.pem",
        "/etc/passwd",
        "/etc/hostname",
        "/%252e%252e/outside.txt",  # double-encoded ../ (decoded once: no traversal)
        "/%252e%252e/%252e%252e/outside.txt",
        "/%25252e%25252e/outside.txt",  # triple-encoded
        "/..%252foutside.txt",
        "/.%2e/outside.txt",
        "/%2e./outside.txt",
        "/sub/..;/outside.txt",
        "/%c0%ae%c0%ae/outside.txt",  # overlong UTF-8 dots: not valid UTF-8
        "/%2fetc/passwd",  # an encoded leading slash: still relative to the folder
        "//etc/passwd",
        "/%2F%2Fetc%2Fpasswd",
        "/..%5c..%5coutside.txt",
        "/sub%00/index.html",
        "http://evil.example/../outside.txt",  # absolute-form target
        "/index.html%00.js",
        "/%ff",
        "/nope.html",
        "/sub/nope/",
    ],
)
def test_nothing_outside_or_hidden_is_found(root: Path, target: str) -> None:
    assert resolve_static(root, target) is None


def test_responses_carry_content_type_and_length(root: Path) -> None:
    r = static_response(root, "/")
    assert r.status_code == 200 and r.body == b"<html>home</html>"
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    assert r.headers["Content-Length"] == str(len(r.body))
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert static_response(root, "/../outside.txt").status_code == 404


@pytest.mark.parametrize(
    ("name", "ctype"),
    [
        ("a.html", "text/html; charset=utf-8"),
        ("a.js", "text/javascript; charset=utf-8"),
        ("a.css", "text/css; charset=utf-8"),
        ("a.svg", "image/svg+xml"),
        ("a.JSON", "application/json"),
        ("a.bin", "application/octet-stream"),
    ],
)
def test_content_types(name: str, ctype: str) -> None:
    assert content_type(Path(name)) == ctype


def test_the_bundled_demo_page_is_in_the_static_folder() -> None:
    assert resolve_static(default_static_dir(), "/") is not None


@pytest.mark.parametrize(
    ("origin", "host", "allowed", "loopback", "ok"),
    [
        (None, "127.0.0.1:8765", (), True, True),  # not a browser
        ("http://127.0.0.1:8765", "127.0.0.1:8765", (), True, True),
        ("http://localhost:8765", "localhost:8765", (), True, True),
        ("http://LOCALHOST:8765", "localhost:8765", (), True, True),
        ("http://[::1]:8765", "[::1]:8765", (), True, True),
        ("https://127.0.0.1:8765", "127.0.0.1:8765", (), True, True),
        ("http://evil.example", "127.0.0.1:8765", (), True, False),
        ("http://127.0.0.1:9999", "127.0.0.1:8765", (), True, False),  # another port
        ("null", "127.0.0.1:8765", (), True, False),
        ("file://", "127.0.0.1:8765", (), True, False),
        ("http://rebind.example:8765", "rebind.example:8765", (), True, False),  # DNS rebinding
        ("http://voice.lan:8765", "voice.lan:8765", (), False, True),
        ("http://127.0.0.1:8765", None, (), True, False),
        ("https://app.example", "127.0.0.1:8765", ("https://app.example",), True, True),
        ("https://app.example/", "127.0.0.1:8765", ("https://app.example",), True, True),
        ("http://127.0.0.1:8765", "127.0.0.1:8765", ("https://app.example",), True, False),
        ("https://anything.example", "x", ("*",), True, True),
    ],
)
def test_origin_rule(
    origin: str | None, host: str | None, allowed: tuple[str, ...], loopback: bool, ok: bool
) -> None:
    assert origin_allowed(origin, host, allowed, loopback) is ok


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.5", False),
        ("voice.lan", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    "target",
    ["/../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/%252e%252e/%252e%252e/etc/passwd", "/etc/passwd"],
)
def test_the_bundled_folder_never_serves_system_files(target: str) -> None:
    assert resolve_static(default_static_dir(), target) is None
    assert static_response(default_static_dir(), target).status_code == 404


def test_static_responses_send_no_referrer(root: Path) -> None:
    # the demo page may be opened as /?token=...: its requests must not carry that URL anywhere
    assert static_response(root, "/?token=abc").headers["Referrer-Policy"] == "no-referrer"


@pytest.mark.parametrize(
    ("authorization", "target", "token"),
    [
        (None, "/ws", None),
        ("Bearer s3cret", "/ws", "s3cret"),
        ("bearer  s3cret ", "/ws", "s3cret"),
        ("BEARER s3cret", "/ws?token=other", "s3cret"),  # the header wins
        ("Basic dXNlcjpwYXNz", "/ws?token=s3cret", ""),  # another scheme: matches nothing
        ("Bearer", "/ws", ""),
        (None, "/ws?token=s3cret", "s3cret"),
        (None, "/ws?a=1&token=s%2Fc%20r", "s/c r"),
        (None, "/ws?token=a&token=b", "b"),
        (None, "/ws?token=", None),
        (None, "/ws#token=s3cret", None),
        (None, "/ws?tok=s3cret", None),
        (None, "/ws?token=%ff", "\ufffd"),
    ],
)
def test_request_token(authorization: str | None, target: str, token: str | None) -> None:
    assert request_token(authorization, target) == token


@pytest.mark.parametrize(
    ("given", "expected", "ok"),
    [
        (None, None, True),  # no token configured
        ("anything", None, True),
        (None, "", True),
        (None, "s3cret", False),
        ("", "s3cret", False),
        ("s3cre", "s3cret", False),
        ("s3cret ", "s3cret", False),
        ("S3CRET", "s3cret", False),
        ("s3cret", "s3cret", True),
        ("pässwörd", "pässwörd", True),
    ],
)
def test_token_check(given: str | None, expected: str | None, ok: bool) -> None:
    assert token_ok(given, expected) is ok


def test_refusal_responses() -> None:
    r = unauthorized_response()
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
    r = rate_limited_response(17)
    assert r.status_code == 429 and r.headers["Retry-After"] == "17"
