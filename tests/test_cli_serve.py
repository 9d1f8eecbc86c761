"""``voice-pipeline serve`` as a user runs it: help, bad flags, and a real process that
serves until SIGINT/SIGTERM and then closes its sessions with 1001 and exits cleanly.

The process loads the real VAD, ASR and TTS; the LLM is a tiny fake OpenAI server
(``--llm-url``), so the test does not start a second vLLM next to the suite's own.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

EXE = [sys.executable, "-m", "voice_pipeline.cli"]


def test_serve_help_explains_the_options() -> None:
    out = subprocess.run([*EXE, "serve", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    for opt in ("--host", "--port", "--max-sessions", "--allow-origin", "--config", "/healthz", "/metrics"):
        assert opt in out.stdout
    top = subprocess.run([*EXE, "--help"], capture_output=True, text=True, timeout=120)
    assert "serve" in top.stdout


@pytest.mark.parametrize("args", [["--port", "70000"], ["--max-sessions", "0"]])
def test_bad_server_flags_fail_before_any_model_loads(args: list[str]) -> None:
    out = subprocess.run([*EXE, "serve", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr.startswith("voice-pipeline serve: error: server.")
    assert "Traceback" not in out.stderr


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
        assert "warmed up" in err and "closing 1 session(s)" in err and err.rstrip().endswith("stopped")
        assert "Traceback" not in err
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
