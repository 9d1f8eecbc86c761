"""``voice-pipeline serve`` as a user runs it: help, bad flags, and a real process that
serves until SIGINT/SIGTERM and then closes its sessions with 1001 and exits cleanly;
its security flags (--token, --certfile/--keyfile, --rate-limit), the loopback default
and the warnings for an exposed address; ``talk --token`` against a real process.

The process loads the real VAD, ASR and TTS; the LLM is a tiny fake OpenAI server
(``--llm-url``), so the test does not start a second vLLM next to the suite's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import soundfile as sf
from speech import espeak
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from voice_pipeline.cli import build_parser
from voice_pipeline.cli.serve import _server_config
from voice_pipeline.config import Config, ServerConfig, load_config
from voice_pipeline.cpu import this_cpu
from voice_pipeline.errors import ConfigError
from voice_pipeline.server.app import exposure_warnings

EXE = [sys.executable, "-m", "voice_pipeline.cli"]


def test_serve_help_explains_the_options() -> None:
    out = subprocess.run([*EXE, "serve", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    for opt in (
        "--host", "--port", "--max-sessions", "--allow-origin", "--config", "/healthz", "/metrics",
        "--token", "VOICE_PIPELINE_TOKEN", "--certfile", "--keyfile", "--rate-limit",
    ):  # fmt: skip
        assert opt in out.stdout
    top = subprocess.run([*EXE, "--help"], capture_output=True, text=True, timeout=120)
    assert "serve" in top.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--port", "70000"],
        ["--max-sessions", "0"],
        ["--rate-limit", "-1"],
        ["--certfile", "cert.pem"],  # without --keyfile
        ["--certfile", "/nonexistent/cert.pem", "--keyfile", "/nonexistent/key.pem"],
    ],
)
def test_bad_server_flags_fail_before_any_model_loads(args: list[str]) -> None:
    out = subprocess.run([*EXE, "serve", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr.startswith("voice-pipeline serve: error: server"), out.stderr
    assert "Traceback" not in out.stderr


# ------------------------------------------------------------ security flags (no models)


def serve_config(*argv: str) -> Config:
    args: argparse.Namespace = build_parser().parse_args(["serve", *argv])
    return _server_config(args, load_config(None))


def test_serve_binds_loopback_without_token_or_tls_but_rate_limited_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VOICE_PIPELINE_TOKEN", raising=False)
    s = serve_config().server
    assert s.host == "127.0.0.1" and ServerConfig().host == "127.0.0.1"
    assert s.auth_token is None and s.certfile is None and s.keyfile is None
    assert s.max_new_sessions_per_ip_per_min == 30
    assert s.allowed_origins == ()  # same origin only
    assert serve_config().telephony.audiosocket_allowed_peers == ("127.0.0.1/32", "::1/128")
    assert s.trusted_proxies == ()


def test_serve_security_flags_reach_the_config(
    monkeypatch: pytest.MonkeyPatch, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    monkeypatch.delenv("VOICE_PIPELINE_TOKEN", raising=False)
    s = serve_config(
        "--token", "t0k", "--certfile", str(cert), "--keyfile", str(key), "--rate-limit", "5"
    ).server
    assert (s.auth_token, s.certfile, s.keyfile, s.max_new_sessions_per_ip_per_min) == (
        "t0k",
        str(cert),
        str(key),
        5,
    )
    assert serve_config("--rate-limit", "0").server.max_new_sessions_per_ip_per_min == 0
    monkeypatch.setenv("VOICE_PIPELINE_TOKEN", "from-env")
    assert serve_config().server.auth_token == "from-env"
    assert serve_config("--token", "flag-wins").server.auth_token == "flag-wins"


def test_a_file_that_is_not_a_certificate_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ConfigError, match="certfile"):
        serve_config("--certfile", str(bad), "--keyfile", str(bad))


@pytest.mark.parametrize(
    ("host", "token", "tls", "warned"),
    [
        ("127.0.0.1", None, False, []),
        ("::1", None, False, []),
        ("localhost", None, False, []),
        ("0.0.0.0", None, False, ["no token", "without TLS"]),
        ("192.168.1.20", "t", False, ["without TLS"]),
        ("::", None, True, ["no token"]),
        ("0.0.0.0", "t", True, []),
    ],
)
def test_exposed_addresses_without_token_or_tls_are_warned_about(
    host: str, token: str | None, tls: bool, warned: list[str]
) -> None:
    tls_files = {"certfile": "c.pem", "keyfile": "k.pem"} if tls else {}
    warnings = exposure_warnings(ServerConfig(host=host, auth_token=token, **tls_files))  # type: ignore[arg-type]
    assert len(warnings) == len(warned)
    for text, expected in zip(warnings, warned, strict=True):
        assert expected in text and host in text


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on ``port`` (Linux /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(".".join(str(int(addr[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


class _FakeOpenAI(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._send(b'{"data": [{"id": "fake"}]}', "application/json")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        chunk = {"choices": [{"delta": {"content": "Hello there."}, "finish_reason": None}]}
        self._send(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode(), "text/event-stream")

    def _send(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.real_models
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_serve_until_a_signal_then_close_sessions_and_exit(fake_llm: str, sig: signal.Signals) -> None:
    proc = await asyncio.create_subprocess_exec(
        *EXE,
        "serve",
        "--port",
        "0",
        "--llm-url",
        fake_llm,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 180)).decode()
        assert "open http://127.0.0.1:" in line, line
        url = line.split("open ", 1)[1].split()[0]
        # bound to the loopback address only (the default), not to every interface
        assert listening_addresses(int(url.rsplit(":", 1)[1].strip("/"))) == {"127.0.0.1"}
        # what its figures run on, with the floors measured at start (a remote LLM: no LLM floors)
        async with httpx.AsyncClient() as client:
            machine = (await client.get(url + "healthz", timeout=10)).json()["machine"]
        assert machine["cpu"]["label"] == this_cpu().label and machine["llm_engine"] == "remote"
        assert machine["floors"]["copy_gb_s"] > 0 and machine["floors"]["matmul_gflops"] > 0
        assert machine["floors"]["llm"] == {"prefill_ms_per_token": None, "decode_ms_per_token": None}
        async with connect(url.replace("http://", "ws://") + "ws") as ws:
            start = {"type": "start", "version": 1, "sample_rate": 16000, "format": "pcm16"}
            await ws.send(json.dumps(start))
            assert json.loads(await ws.recv())["type"] == "ready"
            proc.send_signal(sig)
            with pytest.raises(ConnectionClosed):
                while True:
                    await asyncio.wait_for(ws.recv(), 60)
            assert (ws.close_code, ws.close_reason) == (1001, "server shutting down")
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        err = (await proc.stderr.read()).decode()
        lines = err.splitlines()
        closing = [i for i, line in enumerate(lines) if "closing 1 session(s)" in line]
        # "stopped" comes after the sessions closed; asyncio's debug mode (CI sets
        # PYTHONASYNCIODEBUG) may still log a slow step of the loop's own shutdown after it
        assert "warmed up" in err and closing and "stopped" in lines[closing[0] :], err
        # one line at start says what was chosen for this machine, and why
        (chosen,) = [line for line in err.splitlines() if line.startswith("machine: ")]
        assert chosen.startswith(f"machine: {this_cpu().label}; asr.cpu_threads=") and "(" in chosen
        assert "Traceback" not in err
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _talk(url: str, wav: Path, *extra: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *EXE, "talk", "--url", url, "--input", str(wav), *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 180)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.real_models
async def test_serve_with_a_token_on_an_exposed_address_warns_and_talk_needs_the_token(
    fake_llm: str, tmp_path: Path
) -> None:
    token = "cli-t0ken-4a7e"
    wav = tmp_path / "question.wav"
    sf.write(wav, espeak("What is the capital of France?", 16000), 16000, subtype="PCM_16")
    env = {k: v for k, v in os.environ.items() if k != "VOICE_PIPELINE_TOKEN"}
    proc = await asyncio.create_subprocess_exec(
        *EXE, "serve", "--host", "0.0.0.0", "--port", "0", "--llm-url", fake_llm,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**env, "VOICE_PIPELINE_TOKEN": token},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 180)).decode()
        url = line.split("open ", 1)[1].split()[0]
        ws = url.replace("http://", "ws://") + "ws"
        code, _, err = await _talk(ws, wav, env=env)  # no token
        assert code == 1 and "HTTP 401" in err and "--token" in err and "Traceback" not in err, err
        code, _, err = await _talk(ws, wav, "--token", "wrong", env=env)
        assert code == 1 and "HTTP 401" in err, err
        code, out, err = await _talk(ws, wav, "--token", token, "--json", env=env)
        assert code == 0, err
        events = [json.loads(x) for x in out.splitlines()]
        assert events[0]["type"] == "ready" and events[-1]["type"] == "turn.latency"
        assert events[-1]["record"]["assistant_text"] == "Hello there."
        code, _, err = await _talk(ws, wav, env={**env, "VOICE_PIPELINE_TOKEN": token})  # from the env
        assert code == 0, err
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        err = (await proc.stderr.read()).decode()
        rest = (await proc.stdout.read()).decode()
        assert "warning: 0.0.0.0 is reachable from other machines without TLS" in err, err
        assert "no token is set" not in err  # it is set
        assert "?token=<the token>" in err
        # which endpoints are open, and to whom: /twilio has no credential on this exposed server
        assert "/ws, /v1/realtime: any machine that can reach 0.0.0.0; with the token (--token)" in err
        assert "/twilio: any machine that can reach 0.0.0.0; nobody: refused (HTTP 403)" in err
        assert token not in err + line + rest  # the token is never printed
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _metrics(url: str) -> dict[str, float]:
    async with httpx.AsyncClient() as client:
        text = (await client.get(url + "metrics", timeout=10)).text
    return {
        name.removeprefix("voice_pipeline_"): float(value)
        for name, _, value in (line.rpartition(" ") for line in text.splitlines())
        if name.startswith("voice_pipeline_")
    }


@pytest.mark.real_models
async def test_serve_counts_audiosocket_calls_in_metrics_and_against_max_sessions(fake_llm: str) -> None:
    from test_telephony_audiosocket import Asterisk

    proc = await asyncio.create_subprocess_exec(
        *EXE, "serve", "--port", "0", "--audiosocket-port", "0", "--max-sessions", "1", "--llm-url", fake_llm,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 180)).decode()
        url = line.split("open ", 1)[1].split()[0]
        while not (
            where := re.search(
                r"AudioSocket \(TCP 127.0.0.1:(\d+)\): peers 127.0.0.1/32, ::1/128 only",
                said := (await asyncio.wait_for(proc.stderr.readline(), 30)).decode(),
            )
        ):
            assert said, "serve did not say where AudioSocket calls go, and from whom"
        port = int(where[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        call = Asterisk(reader, writer)
        try:
            call.begin()
            call.say(espeak("What is the capital of France?"))
            async with asyncio.timeout(30):
                while (await _metrics(url))["sessions_active"] < 1:  # noqa: ASYNC110 -- over HTTP
                    await asyncio.sleep(0.1)
            async with connect(url.replace("http://", "ws://") + "ws") as ws:  # the call has the only slot
                with pytest.raises(ConnectionClosed):
                    await ws.send(json.dumps({"type": "start", "version": 1, "sample_rate": 16000}))
                    await asyncio.wait_for(ws.recv(), 30)
                assert ws.close_code == 1013
            async with asyncio.timeout(120):  # the call's turn is answered and counted
                while (await _metrics(url))["turns_total"] < 1:  # noqa: ASYNC110 -- over HTTP
                    await asyncio.sleep(0.2)
            assert len(call.audio()) >= 25  # half a second of "Hello there." reached the caller
            await call.hang_up()
            async with asyncio.timeout(10):
                while not call.closed:  # noqa: ASYNC110 -- the server hangs up
                    await asyncio.sleep(0.05)
        finally:
            await call.aclose()
        async with asyncio.timeout(10):
            while (m := await _metrics(url))["sessions_active"] > 0:  # noqa: ASYNC110 -- over HTTP
                await asyncio.sleep(0.1)
        assert m["sessions_total"] == 1 and m['sessions_refused_total{reason="limit"}'] == 1
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        assert "Traceback" not in (await proc.stderr.read()).decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_talk_token_comes_from_the_flag_else_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from clients.talk import options

    def token(*argv: str) -> str | None:
        return options(build_parser().parse_args(["talk", *argv])).token

    monkeypatch.delenv("VOICE_PIPELINE_TOKEN", raising=False)
    assert token() is None
    assert token("--token", "abc") == "abc"
    monkeypatch.setenv("VOICE_PIPELINE_TOKEN", "env-tok")
    assert token() == "env-tok"
    assert token("--token", "abc") == "abc"
    monkeypatch.setenv("VOICE_PIPELINE_TOKEN", "")
    assert token() is None
