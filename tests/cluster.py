"""Processes of the scale-out test: ``voice-pipeline serve`` workers sharing one LLM
server, and nginx in front of them (config from voice_pipeline.deploy.nginx)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from procs import ProcessFailed, free_port, stop_group, tail, wait_healthy

from voice_pipeline.deploy.nginx import ACCESS_LOG, ERROR_LOG, NginxSite, render_standalone

WORKER_START_TIMEOUT_S = 300.0
WORKER_STOP_TIMEOUT_S = 60.0
NGINX_START_TIMEOUT_S = 30.0


def voice_pipeline_exe() -> str:
    """The ``voice-pipeline`` script of the running interpreter's venv."""
    exe = Path(sys.executable).parent / "voice-pipeline"
    if exe.exists():
        return str(exe)
    found = shutil.which("voice-pipeline")
    if found is None:
        raise ProcessFailed("voice-pipeline is not installed (pip install -e .)")
    return found


def nginx_exe() -> str | None:
    """nginx from PATH or Debian's /usr/sbin (often not on a normal user's PATH)."""
    found = shutil.which("nginx")
    if found is None and Path("/usr/sbin/nginx").exists():
        found = "/usr/sbin/nginx"
    return found


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {"name{labels}": value} (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    started_at: float
    #: seconds from the process start to a healthy /healthz (model loading + warm-up)
    start_s: float = 0.0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def wait_healthy(self) -> None:
        wait_healthy(self.proc, f"{self.url}/healthz", self.log_path, WORKER_START_TIMEOUT_S)
        self.start_s = time.monotonic() - self.started_at

    def metrics(self) -> dict[str, float]:
        response = httpx.get(f"{self.url}/metrics", timeout=10.0)
        response.raise_for_status()
        return parse_metrics(response.text)

    def stop(self) -> int:
        """SIGTERM the worker's process group (as a supervisor would); its exit code.
        SIGKILL (then a negative code) only if it does not stop in time."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(WORKER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                stop_group(self.proc)
        return self.proc.wait()

    def rss_mib(self) -> float:
        """Resident memory of the worker process now (Linux /proc)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_worker(llm_url: str, log_path: Path, max_sessions: int, *extra: str) -> Worker:
    """``voice-pipeline serve`` on a free loopback port using the LLM server at ``llm_url``
    (it loads only VAD, ASR and TTS), with ``extra`` flags. Returns at once: call
    :meth:`Worker.wait_healthy`."""
    port = free_port()
    cmd = [
        voice_pipeline_exe(),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--llm-url",
        llm_url,
        "--max-sessions",
        str(max_sessions),
        *extra,
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return Worker(proc, port, log_path, time.monotonic())


@dataclass
class Nginx:
    proc: subprocess.Popen[bytes]
    port: int
    prefix: Path

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def access_log(self) -> list[str]:
        path = self.prefix / ACCESS_LOG
        return path.read_text().splitlines() if path.exists() else []


@contextlib.contextmanager
def nginx_proxy(workers: list[str], prefix: Path) -> Iterator[Nginx]:
    """nginx in the foreground, config and every file of it in ``prefix``; as root or not
    (the workers it forks as root only proxy, they write no temp file)."""
    exe = nginx_exe()
    if exe is None:
        raise ProcessFailed("nginx is not installed (Debian: apt-get install nginx; bootstrap.sh does)")
    port = free_port()
    site = NginxSite(workers=tuple(workers), listen=f"127.0.0.1:{port}", access_log=ACCESS_LOG)
    (prefix / "nginx.conf").write_text(render_standalone(site, worker_processes=1))
    out_path = prefix / "stderr.log"
    with out_path.open("wb") as out:
        proc = subprocess.Popen(
            [exe, "-p", str(prefix), "-c", "nginx.conf", "-e", ERROR_LOG, "-g", "daemon off;"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        try:
            wait_healthy(proc, f"http://127.0.0.1:{port}/healthz", out_path, NGINX_START_TIMEOUT_S)
        except ProcessFailed as exc:
            raise ProcessFailed(f"{exc}\nerror.log:\n{tail(prefix / ERROR_LOG)}") from exc
        yield Nginx(proc, port, prefix)
    finally:
        stop_group(proc)
