"""Scale-out on loopback: two ``voice-pipeline serve`` workers share one real vLLM
OpenAI server (the session's ``vllm_server_url``) behind nginx, whose configuration
comes from :mod:`voice_pipeline.deploy.nginx` -- the text docs/deployment.md shows.

* the renderer (pure), its command and the documented text; ``nginx -t`` accepts both
  forms of the config;
* nginx itself in front of stand-in WebSocket servers: what a worker receives (the
  upgrade, Host with its port, X-Forwarded-For appended) and least_conn's choices;
* the real thing: two workers (VAD/ASR/TTS loaded, the LLM remote) behind nginx.
  Sessions of a test client and then ``voice-pipeline bench`` go through nginx; each
  worker's /metrics must show it served some of them and every turn got a reply; the
  per-client rate limit works behind nginx with ``server.trusted_proxies``; the
  workers exit 0 on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from cluster import Nginx, Worker, nginx_exe, nginx_proxy, start_worker, voice_pipeline_exe
from procs import ProcessFailed
from speech import espeak, normalize, word_error_rate
from websockets.asyncio.client import connect as connect_async
from websockets.exceptions import InvalidStatus
from websockets.http11 import Request, Response
from websockets.sync.client import ClientConnection, connect
from websockets.sync.server import ServerConnection, serve
from websockets.typing import Origin
from wsclient import voice_client

from voice_pipeline.deploy.nginx import ACCESS_LOG, NginxSite, render_site, render_standalone
from voice_pipeline.errors import ConfigError

QUESTION = "What is the capital of France?"
SESSIONS = 2
WORKERS = 2
#: new sessions per client per minute on each worker (above what the other tests open)
RATE_LIMIT = 8
#: the bench's run through nginx: callers x turns, a share of the replies interrupted
BENCH_SESSIONS = 4
BENCH_TURNS = 2
BENCH_INTERRUPT_SHARE = 0.25
BENCH_TIMEOUT_S = 600.0
#: every figure of a bench step's JSON (voice-pipeline.bench/1)
STEP_FIELDS = {
    "sessions",
    "refused",
    "duration_s",
    "turns",
    "turns_completed",
    "turns_per_s",
    "interrupts_planned",
    "interrupts_done",
    "summary",
    "over_budget",
    "cpu",
    "bench",
    "server_metrics",
    "turn_results",
}

SITE = NginxSite(workers=("127.0.0.1:8801", "127.0.0.1:8802"), listen="8080")


# ---------------------------------------------------------------- the config text (pure)


def test_the_config_balances_websocket_sessions_over_the_workers() -> None:
    text = render_site(SITE)
    for line in (
        "least_conn;",
        "zone voice_pipeline 64k;",
        "server 127.0.0.1:8801 max_fails=1 fail_timeout=10s;",
        "server 127.0.0.1:8802 max_fails=1 fail_timeout=10s;",
        "listen 8080;",
        "map $http_upgrade $voice_pipeline_connection {",
        "proxy_http_version 1.1;",
        "proxy_set_header Upgrade $http_upgrade;",
        "proxy_set_header Connection $voice_pipeline_connection;",
        "proxy_set_header Host $http_host;",
        "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
        "proxy_set_header X-Real-IP $remote_addr;",
        "proxy_buffering off;",
        "location = /ws {",
        "location = /twilio {",
        "location = /healthz {",
        "location / {",
        "proxy_read_timeout 3600s;",
    ):
        assert line in text, line
    # the session timeout applies to both WebSocket locations, and proxy_set_header
    # lives at server level only (a location setting its own would drop the others)
    assert text.count("proxy_read_timeout 3600s;") == 2
    directives = [ln.strip() for ln in text.splitlines() if not ln.strip().startswith("#")]
    assert [d for d in directives if d.startswith("proxy_set_header")] == [
        d for d in directives[: directives.index("location = /ws {")] if d.startswith("proxy_set_header")
    ]
    assert len([d for d in directives if d.startswith("proxy_set_header")]) == 6
    assert "sticky" not in text and "ip_hash" not in text


def test_the_complete_config_keeps_every_path_under_the_prefix() -> None:
    site = replace(SITE, access_log=ACCESS_LOG)
    text = render_standalone(site)
    assert text.count(render_site(site).splitlines()[0]) == 1  # the site, once, inside http {}
    for directive in ("pid", "error_log", "access_log", "client_body_temp_path", "proxy_temp_path"):
        (line,) = [
            ln.strip()
            for ln in text.splitlines()
            if ln.strip().startswith(directive + " ") and "off" not in ln
        ]
        assert not line.split()[1].startswith("/"), line
    lines = [ln.strip() for ln in text.splitlines()]
    assert not [ln for ln in lines if ln.startswith(("user ", "daemon "))]  # -g 'daemon off;' is the caller's
    assert "\nuser www-data;\n" in render_standalone(site, user="www-data")
    assert "worker_processes 1;" in render_standalone(site, worker_processes=1)


@pytest.mark.parametrize(
    ("site", "message"),
    [
        (NginxSite(workers=()), "at least one worker"),
        (NginxSite(workers=("127.0.0.1",)), "expected host:port"),
        (NginxSite(workers=("127.0.0.1:0",)), "port must be 1-65535"),
        (NginxSite(workers=("127.0.0.1:http",)), "port must be 1-65535"),
        (NginxSite(workers=("::1:8801",)), "expected host:port"),
        (NginxSite(workers=("a;b:8801",)), "expected host:port"),
        (NginxSite(workers=("h:1", "h:1")), "listed twice"),
        (NginxSite(workers=("h:1",), listen="70000"), "port must be 1-65535"),
        (NginxSite(workers=("h:1",), listen="0.0.0.0"), "expected host:port"),
        (NginxSite(workers=("h:1",), server_name="a;b"), "server_name"),
        (NginxSite(workers=("h:1",), upstream="voice-pipeline"), "identifier"),
        (NginxSite(workers=("h:1",), session_timeout_s=0), "timeouts"),
        (NginxSite(workers=("h:1",), access_log="/x y.log"), "access_log"),
    ],
)
def test_bad_sites_are_config_errors(site: NginxSite, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        render_site(site)


def test_ipv6_and_named_workers_are_accepted() -> None:
    text = render_site(NginxSite(workers=("[::1]:8801", "voice-2.internal:8801"), listen="[::]:443"))
    assert "server [::1]:8801 " in text and "server voice-2.internal:8801 " in text
    assert "listen [::]:443;" in text


def _module(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "voice_pipeline.deploy.nginx", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_the_command_prints_the_rendered_config() -> None:
    workers = ["--worker", "127.0.0.1:8801", "--worker", "127.0.0.1:8802"]
    out = _module(*workers, "--listen", "8080")
    assert out.returncode == 0, out.stderr
    assert out.stdout == render_standalone(replace(SITE, access_log=ACCESS_LOG))
    site = _module(*workers, "--listen", "8080", "--site")
    assert site.stdout == render_site(SITE)
    bad = _module("--worker", "127.0.0.1")
    assert bad.returncode == 2 and "expected host:port" in bad.stderr and "Traceback" not in bad.stderr
    mixed = _module(*workers, "--site", "--user", "www-data")
    assert mixed.returncode == 2 and "complete config" in mixed.stderr


def test_the_documented_config_is_the_rendered_one() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "deployment.md").read_text()
    block = doc.split("```nginx\n", 1)[1].split("```", 1)[0]
    assert block == render_site(SITE)  # `... --listen 8080 --site`, as the doc says


def _nginx() -> str:
    exe = nginx_exe()
    if exe is None:
        pytest.fail("nginx is not installed (Debian: apt-get install nginx; bootstrap.sh's test job does)")
    return exe


def test_nginx_accepts_both_forms_of_the_config(tmp_path: Path) -> None:
    (tmp_path / "nginx.conf").write_text(render_standalone(replace(SITE, access_log=ACCESS_LOG)))
    # the conf.d form, included by a minimal main config as Debian's nginx.conf does
    site = replace(SITE, access_log="site.access.log")
    (tmp_path / "site.conf").write_text(render_site(site))
    main = (tmp_path / "nginx.conf").read_text().split("http {")[0] + "http {\n    include site.conf;\n}\n"
    (tmp_path / "main.conf").write_text(main)
    for conf in ("nginx.conf", "main.conf"):
        out = subprocess.run(
            [_nginx(), "-t", "-p", str(tmp_path), "-c", conf, "-e", "error.log"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "test is successful" in out.stderr


# ---------------------------------------------------------------- nginx itself, with stand-in workers


class StandIn:
    """A WebSocket server in a thread standing in for a worker: it records each upgrade
    request's headers, says its name, and holds the connection until the client closes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests: list[Request] = []
        self.server = serve(self._handle, "127.0.0.1", 0, process_request=self._http, compression=None)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.socket.getsockname()[1]}"

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        return connection.respond(200, "ok\n") if request.path == "/healthz" else None

    def _handle(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        self.requests.append(ws.request)
        ws.send(self.name)
        for _ in ws:
            pass

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(10)


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nginx, list[StandIn]]]:
    workers = [StandIn("a"), StandIn("b")]
    try:
        with nginx_proxy([w.address for w in workers], tmp_path_factory.mktemp("nginx-stand-ins")) as nginx:
            yield nginx, workers
    except ProcessFailed as exc:
        pytest.fail(str(exc))
    finally:
        for worker in workers:
            worker.close()


def test_the_worker_gets_the_upgrade_the_host_and_the_client_address(
    stand_ins: tuple[Nginx, list[StandIn]],
) -> None:
    nginx, workers = stand_ins
    origin = nginx.http_url
    spoofed = {"X-Forwarded-For": "203.0.113.7"}  # a client's claim: nginx appends the real peer
    with connect(nginx.ws_url + "?token=t", origin=Origin(origin), additional_headers=spoofed) as ws:
        name = ws.recv(timeout=10)
    request = next(w for w in workers if w.name == name).requests[-1]
    assert request.path == "/ws?token=t"  # the query (a session token) passes unchanged
    headers = request.headers
    assert headers["Upgrade"].lower() == "websocket" and "upgrade" in headers["Connection"].lower()
    assert headers["Host"] == f"127.0.0.1:{nginx.port}"  # the port kept: Origin checks match
    assert headers["Origin"] == origin
    assert headers["X-Forwarded-For"] == "203.0.113.7, 127.0.0.1"  # right-most = nginx's peer
    assert headers["X-Real-IP"] == "127.0.0.1"
    assert headers["X-Forwarded-Proto"] == "http"
    with connect(f"ws://127.0.0.1:{nginx.port}/twilio") as ws:  # Twilio Media Streams too
        name = ws.recv(timeout=10)
    assert next(w for w in workers if w.name == name).requests[-1].path == "/twilio"


def test_new_sessions_go_to_the_worker_with_the_fewest_open_ones(
    stand_ins: tuple[Nginx, list[StandIn]],
) -> None:
    nginx, _ = stand_ins
    with contextlib.ExitStack() as stack:

        def open_session() -> tuple[str, ClientConnection]:
            ws = stack.enter_context(connect(nginx.ws_url))
            return str(ws.recv(timeout=10)), ws

        held = [open_session() for _ in range(4)]
        assert sorted(name for name, _ in held) == ["a", "a", "b", "b"]  # ties: in turn
        for name, ws in held:
            if name == "a":
                ws.close()
        # b still holds two sessions, a none: the next two both go to a
        assert [open_session()[0] for _ in range(2)] == ["a", "a"]


def test_a_worker_that_is_down_is_skipped(tmp_path: Path) -> None:
    up, down = StandIn("up"), StandIn("down")
    try:
        with nginx_proxy([up.address, down.address], tmp_path) as nginx:
            down.close()  # its port now refuses connections
            names = []
            for _ in range(4):
                with connect(nginx.ws_url) as ws:
                    names.append(ws.recv(timeout=10))
            assert names == ["up"] * 4
            assert httpx.get(f"{nginx.http_url}/healthz", timeout=10.0).status_code == 200
    except ProcessFailed as exc:
        pytest.fail(str(exc))
    finally:
        up.close()


# ---------------------------------------------------------------- two workers behind nginx


@dataclass
class Cluster:
    workers: list[Worker]
    nginx: Nginx


@pytest.fixture(scope="module")
def cluster(vllm_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("scaleout")
    t0 = time.monotonic()
    # each worker takes whatever nginx gives it (up to every session of a run), trusts
    # nginx's X-Forwarded-For and limits each client's new sessions (docs/deployment.md)
    config = base / "worker.yaml"
    config.write_text('server:\n  trusted_proxies: ["127.0.0.1/32"]\n')
    flags = ("--config", str(config), "--rate-limit", str(RATE_LIMIT))
    workers = [
        start_worker(vllm_server_url, base / f"worker{i}.log", BENCH_SESSIONS, *flags) for i in range(WORKERS)
    ]
    try:
        for worker in workers:  # they load in parallel
            worker.wait_healthy()
        print(
            f"\nworkers healthy in {time.monotonic() - t0:.1f} s "
            f"(each: {', '.join(f'{w.start_s:.1f} s' for w in workers)}; "
            f"RSS {', '.join(f'{w.rss_mib():.0f} MiB' for w in workers)})"
        )
        for line in workers[0].log().splitlines():
            if line.startswith(("loaded ", "warmed up")):
                print(f"  worker 0: {line}")
        (base / "nginx").mkdir()
        with nginx_proxy([w.address for w in workers], base / "nginx") as nginx:
            yield Cluster(workers, nginx)
    except ProcessFailed as exc:
        pytest.fail(str(exc))
    finally:
        for worker in workers:
            worker.stop()


@pytest.mark.real_models
def test_healthz_through_nginx_is_a_workers_answer(cluster: Cluster) -> None:
    health = httpx.get(f"{cluster.nginx.http_url}/healthz", timeout=10.0).json()
    assert health["status"] == "ok" and health["max_sessions"] == BENCH_SESSIONS
    assert httpx.get(f"{cluster.nginx.http_url}/metrics", timeout=10.0).status_code == 404
    page = httpx.get(f"{cluster.nginx.http_url}/", timeout=10.0)
    assert page.status_code == 200 and "<html" in page.text.lower()


async def _converse(url: str, origin: str | None) -> tuple[str, str]:
    """One session: say the question, wait for its turn's record; (heard, replied)."""
    async with voice_client(url, origin=origin) as client:
        await client.start()
        client.start_microphone()
        client.say(espeak(QUESTION))
        latency = await client.wait_for(lambda m: m["type"] == "turn.latency", 180)
        record = latency["record"]
        return str(record["user_text"]), str(record["assistant_text"])


def _counts(metrics: list[dict[str, float]], what: str) -> list[float]:
    return [m[f"voice_pipeline_{what}_total"] for m in metrics]


async def _upgrades_logged(nginx: Nginx, n: int) -> list[str]:
    """nginx's access-log lines of /ws upgrades (written when a connection ends)."""
    async with asyncio.timeout(30):
        while True:
            lines = [ln for ln in nginx.access_log() if '"GET /ws HTTP/1.1" 101 ' in ln]
            if len(lines) >= n:
                return lines
            await asyncio.sleep(0.2)


@pytest.mark.real_models
async def test_sessions_through_nginx_reach_both_workers_and_get_replies(cluster: Cluster) -> None:
    before = [w.metrics() for w in cluster.workers]
    # one session as the demo page served through nginx opens it: with nginx's own origin,
    # which the worker accepts only because nginx passes the Host header on with its port
    origins = [cluster.nginx.http_url, *[None] * (SESSIONS - 1)]
    results = await asyncio.gather(*(_converse(cluster.nginx.ws_url, o) for o in origins))
    for heard, replied in results:
        assert word_error_rate(QUESTION, heard) <= 0.2, heard
        assert "paris" in normalize(replied), replied
    after = [w.metrics() for w in cluster.workers]
    served = [a - b for a, b in zip(_counts(after, "sessions"), _counts(before, "sessions"), strict=True)]
    turns = [a - b for a, b in zip(_counts(after, "turns"), _counts(before, "turns"), strict=True)]
    assert all(n >= 1 for n in served), served
    assert sum(served) == SESSIONS and sum(turns) == SESSIONS, (served, turns)
    assert all(a["voice_pipeline_turn_failures_total"] == 0 for a in after)
    # nginx proxied each session (101 Switching Protocols) and used both workers
    upgrades = await _upgrades_logged(cluster.nginx, SESSIONS)
    assert {ln.split("upstream=")[1].split()[0] for ln in upgrades} == {w.address for w in cluster.workers}


@pytest.mark.real_models
async def test_the_bench_drives_sessions_through_nginx_to_both_workers(
    cluster: Cluster, tmp_path: Path
) -> None:
    before = [w.metrics() for w in cluster.workers]
    report_path = tmp_path / "bench.json"
    cmd = [
        voice_pipeline_exe(),
        "bench",
        "--url",
        cluster.nginx.ws_url,
        "--sessions",
        str(BENCH_SESSIONS),
        "--turns",
        str(BENCH_TURNS),
        "--interrupt-share",
        str(BENCH_INTERRUPT_SHARE),
        "--seed",
        "7",
        "--json",
        str(report_path),
    ]
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), BENCH_TIMEOUT_S)
    print(f"\nbench through nginx: {time.monotonic() - t0:.1f} s\n{out.decode()}")
    assert proc.returncode == 0, err.decode()[-4000:]
    report = json.loads(report_path.read_text())
    after = [w.metrics() for w in cluster.workers]

    # the report is complete: one step, every session admitted, every turn answered
    assert report["schema"] == "voice-pipeline.bench/1"
    assert set(report) >= {"config", "server", "summary", "ramp", "steps", "warnings"}
    assert report["config"]["url"] == cluster.nginx.ws_url
    (step,) = report["steps"]
    assert set(step) >= STEP_FIELDS, STEP_FIELDS - set(step)
    assert step["sessions"] == BENCH_SESSIONS and not step["refused"]
    assert step["turns"] == step["turns_completed"] == BENCH_SESSIONS * BENCH_TURNS
    planned = round(BENCH_INTERRUPT_SHARE * BENCH_SESSIONS * BENCH_TURNS)
    assert step["interrupts_planned"] == planned
    for turn in step["turn_results"]:
        assert turn["error"] is None, turn
        assert turn["reply_audio_s"] > 0 and turn["voice_to_voice_ms"] is not None, turn
        # (an interruption may open an empty server turn of its own before the answered one)
        assert any(r["user_text"] and r["assistant_text"] for r in turn["records"]), turn
    assert {t["session"] for t in step["turn_results"]} == set(range(BENCH_SESSIONS))
    for section in ("client", "server"):
        assert "voice_to_voice" in step["summary"][section], step["summary"]
    assert report["summary"] == step["summary"]
    # behind the balancer the bench sees no /metrics (nginx answers 404): no CPU figures
    assert step["cpu"] is None and step["server_metrics"] is None

    # both workers served sessions, and together every one of them and every turn
    served = [a - b for a, b in zip(_counts(after, "sessions"), _counts(before, "sessions"), strict=True)]
    turns = [a - b for a, b in zip(_counts(after, "turns"), _counts(before, "turns"), strict=True)]
    records = sum(len(t["records"]) for t in step["turn_results"])
    assert all(n >= 1 for n in served) and sum(served) == BENCH_SESSIONS, served
    assert sum(turns) == records >= BENCH_SESSIONS * BENCH_TURNS, (turns, records)
    barge_ins = [
        a - b for a, b in zip(_counts(after, "barge_ins"), _counts(before, "barge_ins"), strict=True)
    ]
    # (a worker also counts a reply cut by the caller hanging up)
    assert sum(barge_ins) >= step["interrupts_done"] == planned, (barge_ins, step["interrupts_done"])
    assert all(a["voice_pipeline_turn_failures_total"] == 0 for a in after)


async def _handshake(url: str, forwarded_for: str) -> int:
    """The HTTP status of a /ws handshake sent with this X-Forwarded-For (closed at once)."""
    try:
        async with connect_async(url, additional_headers={"X-Forwarded-For": forwarded_for}):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def _rate_refusals(workers: list[Worker]) -> list[float]:
    return [w.metrics().get('voice_pipeline_sessions_refused_total{reason="rate"}', 0.0) for w in workers]


@pytest.mark.real_models
async def test_behind_nginx_each_forwarded_client_has_its_own_rate_budget(cluster: Cluster) -> None:
    # nginx appends its peer to X-Forwarded-For and the workers trust nginx: the client is
    # the right-most untrusted entry. On loopback the caller's own address is nginx's, so
    # the test can play two clients by what it claims.
    url, workers = cluster.nginx.ws_url, cluster.workers
    before = _rate_refusals(workers)
    admitted = 0
    for _ in range(WORKERS * RATE_LIMIT + 8):  # until every worker has refused client A
        status = await _handshake(url, "198.51.100.9")
        admitted += status == 101
        if all(a > b for a, b in zip(_rate_refusals(workers), before, strict=True)):
            break
    else:
        raise AssertionError(f"client A was never refused by every worker: {_rate_refusals(workers)}")
    assert admitted == WORKERS * RATE_LIMIT  # each worker admitted its budget of A's sessions
    assert await _handshake(url, "198.51.100.9") == 429
    # another client behind the same nginx still has its whole budget on every worker
    assert [await _handshake(url, "198.51.100.10") for _ in range(WORKERS)] == [101] * WORKERS


@pytest.mark.real_models
def test_workers_stop_cleanly_on_sigterm(cluster: Cluster) -> None:
    for worker in cluster.workers:
        assert worker.stop() == 0, worker.log()[-2000:]
        log = worker.log()
        lines = log.splitlines()
        assert any(ln.startswith("shutting down: closing ") for ln in lines), log[-2000:]
        assert "stopped" in lines, log[-2000:]
        assert "Traceback" not in log and "never awaited" not in log, log[-4000:]
