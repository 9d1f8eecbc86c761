"""Running the bench: the steps (N concurrent callers each), the /metrics scrapes, the ramp.

Each step opens every session first (so a refusal is known before any turn is
measured), then runs their scripts concurrently while a sampler scrapes the
server's ``/metrics`` every ``scrape_interval_s``. With ``ramp`` the steps go
1, 2, 3, ... sessions until p95 voice-to-voice (at the client) breaks its
budget, the server refuses a session (1013) or ``max_sessions`` is reached.
"""

from __future__ import annotations

import asyncio
import json
import resource
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from voice_pipeline.bench.caller import Caller, CallerIO, CallerOptions
from voice_pipeline.bench.caller_twilio import TwilioCaller
from voice_pipeline.bench.caller_ws import WebSocketCaller
from voice_pipeline.bench.errors import BenchError
from voice_pipeline.bench.options import BenchOptions
from voice_pipeline.bench.scenario import Speech, interrupt_count, plan_step
from voice_pipeline.bench.stats import (
    RampStep,
    RampVerdict,
    Scrape,
    busy_share,
    host_cpu_times,
    parse_metrics,
    ramp_verdict,
    summarize,
)
from voice_pipeline.bench.tracker import TurnResult
from voice_pipeline.config import BudgetConfig
from voice_pipeline.connect import ServerSessionError, ServerUnreachableError, SessionRefusedError
from voice_pipeline.cpu import this_cpu
from voice_pipeline.ledger.ledger import STAGES

HTTP_TIMEOUT_S = 5.0
#: refusals that mean "no more sessions now" (the ramp's stop), not a mistake: the session
#: limit (close 1013) and the per-address rate limit (HTTP 429)
LIMIT_CODES = {1013: "server_limit", 429: "rate_limit"}
IDLE_WAIT_S = 15.0


@dataclass(slots=True)
class StepResult:
    sessions: int
    turns: list[TurnResult] = field(default_factory=list)
    duration_s: float = 0.0
    refused: str | None = None  # why the server refused a session (the message)
    refused_code: int | None = None  # 1013 (session limit) or 429 (rate limit)
    scrapes: list[Scrape] = field(default_factory=list)
    bench_cpu_s: float = 0.0
    max_mic_lag_s: float = 0.0
    interrupts_planned: int = 0
    #: share of the bench's machine busy during the step, every process (None: no /proc/stat)
    host_cpu_busy: float | None = None

    def v2v(self) -> list[float]:
        return [t.voice_to_voice_ms for t in self.turns if t.voice_to_voice_ms is not None]


@dataclass(slots=True)
class BenchResult:
    options: BenchOptions
    budgets: dict[str, float]
    budget_source: str
    health: dict[str, Any] | None
    speech: list[str]
    steps: list[StepResult] = field(default_factory=list)
    verdict: RampVerdict | None = None
    warnings: list[str] = field(default_factory=list)
    #: the bench's own machine (voice_pipeline.cpu.CPUInfo.as_dict); the server's is in
    #: ``health["machine"]``
    bench_machine: dict[str, Any] | None = None


# ------------------------------------------------------------ plain HTTP beside the WebSocket


def http_url(ws_url: str, path: str) -> str:
    """``ws://host:port/ws`` -> ``http://host:port/<path>`` (same prefix; wss -> https)."""
    parts = urlsplit(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    prefix = parts.path.rsplit("/", 1)[0]
    return urlunsplit((scheme, parts.netloc, f"{prefix}/{path}", "", ""))


def _get(url: str, token: str | None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
            return int(resp.status), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""


async def http_get(url: str, token: str | None) -> tuple[int, str]:
    return await asyncio.to_thread(_get, url, token)


async def health(opts: BenchOptions) -> dict[str, Any] | None:
    """The server's /healthz (None: it has none, e.g. behind a proxy); unreachable = error."""
    url = http_url(opts.url, "healthz")
    try:
        status, body = await http_get(url, opts.token)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerUnreachableError(f"server not reachable at {opts.url}: {reason}") from exc
    if status not in (200, 503):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


async def scrape(opts: BenchOptions) -> Scrape | None:
    loop = asyncio.get_running_loop()
    try:
        status, body = await http_get(http_url(opts.url, "metrics"), opts.token)
    except (urllib.error.URLError, OSError, TimeoutError):
        return None
    if status != 200:
        return None
    return Scrape(loop.time(), parse_metrics(body))


async def wait_idle(opts: BenchOptions) -> None:
    """Until the server has released every session (or IDLE_WAIT_S), so a step is not refused
    for the previous step's sessions still closing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + IDLE_WAIT_S
    while loop.time() < deadline:
        h = await health(opts)
        if h is None or not h.get("sessions_active"):
            return
        await asyncio.sleep(0.2)


# ------------------------------------------------------------ one step


def _io(opts: BenchOptions, session: int) -> CallerIO:
    if opts.protocol == "twilio":
        return TwilioCaller(opts.url, opts.token, stream_sid=f"MZbench{session:04d}")
    return WebSocketCaller(opts.url, opts.token)


def _host_cpu() -> tuple[float, float] | None:
    try:
        return host_cpu_times(Path("/proc/stat").read_text())
    except OSError:
        return None


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


async def run_step(
    opts: BenchOptions,
    speech: Speech,
    sessions: int,
    on_turn: Callable[[TurnResult], None],
    on_ready: Callable[[CallerIO], None] = lambda io: None,
) -> StepResult:
    loop = asyncio.get_running_loop()
    step = StepResult(
        sessions, interrupts_planned=interrupt_count(opts.interrupt_share, sessions, opts.turns)
    )
    plans = plan_step(speech, sessions, opts.turns, opts.interrupt_share, opts.seed, opts.pauses)
    options = CallerOptions(pause_s=opts.pause_s, reply_timeout_s=opts.reply_timeout_s)
    origin = loop.time()
    callers = [
        Caller(
            _io(opts, p.session),
            p,
            options,
            origin_t=origin,
            has_records=opts.protocol == "ws",
            on_turn=on_turn,
        )
        for p in plans
    ]
    opened = await asyncio.gather(*(c.open() for c in callers), return_exceptions=True)
    errors = [e for e in opened if isinstance(e, BaseException)]
    if errors:
        await asyncio.gather(*(c.io.aclose() for c in callers), return_exceptions=True)
        for e in errors:
            if isinstance(e, SessionRefusedError) and e.code in LIMIT_CODES:
                step.refused, step.refused_code = str(e), e.code
                return step
        raise errors[0]
    on_ready(callers[0].io)
    first = await scrape(opts)
    step.scrapes = [first] if first else []
    cpu0, t0, host0 = _cpu_s(), loop.time(), _host_cpu()

    async def sample() -> None:
        while True:
            await asyncio.sleep(opts.scrape_interval_s)
            s = await scrape(opts)
            if s is not None:
                step.scrapes.append(s)

    sampler = asyncio.create_task(sample())
    try:
        async with asyncio.TaskGroup() as tg:
            for c in callers:
                tg.create_task(c.run())
    except BaseExceptionGroup as group:
        bench = [e for e in _leaves(group) if isinstance(e, BenchError | ServerSessionError)]
        if bench:
            raise bench[0] from None
        raise
    finally:
        sampler.cancel()
        await asyncio.wait([sampler])
    step.duration_s = loop.time() - t0
    step.bench_cpu_s = _cpu_s() - cpu0
    step.host_cpu_busy = busy_share(host0, _host_cpu())
    last = await scrape(opts)
    if last is not None:
        step.scrapes.append(last)
    step.turns = sorted((r for c in callers for r in c.results), key=lambda r: (r.session, r.index))
    step.max_mic_lag_s = max(c.mic.max_lag_s for c in callers)
    return step


# ------------------------------------------------------------ the whole run


def ramp_budget(result: BenchResult) -> float:
    """The p95 voice-to-voice the ramp holds the server to."""
    if result.options.ramp_budget_ms is not None:
        return result.options.ramp_budget_ms
    return result.budgets.get("voice_to_voice", 800.0)


def p95_v2v(step: StepResult) -> float | None:
    s = summarize(step.v2v())
    return s.p95 if s is not None else None


async def run_bench(
    opts: BenchOptions,
    speech_factory: Callable[[], Speech],
    progress: Callable[[str], None],
    on_turn: Callable[[TurnResult], None] = lambda r: None,
    local_budget: BudgetConfig | None = None,
) -> BenchResult:
    """``local_budget``: the budgets when the protocol does not say the server's (Twilio)."""
    h = await health(opts)  # unreachable fails here, before any speech is synthesized
    speech = await asyncio.to_thread(speech_factory)
    result = BenchResult(
        opts,
        budgets={s.name: float(getattr(BudgetConfig(), s.budget_key)) for s in STAGES},
        budget_source="defaults (no ready message yet)",
        health=h,
        speech=[
            c.text for c in (*speech.questions, *speech.long_prompts, *speech.interruptions, *speech.paused)
        ],
        bench_machine=this_cpu().as_dict(),
    )
    if opts.protocol == "twilio":
        result.budget_source = "the local latency_budget.yaml (Twilio's protocol does not carry the server's)"
        local = local_budget or BudgetConfig()
        result.budgets = {s.name: float(getattr(local, s.budget_key)) for s in STAGES}

    def ready(io: CallerIO) -> None:
        if io.budgets:
            result.budgets = dict(io.budgets)
            result.budget_source = "the server's ready message"

    server_max = int(h["max_sessions"]) if h and isinstance(h.get("max_sessions"), int) else None
    if not opts.ramp:
        await wait_idle(opts)
        step = await run_step(opts, speech, opts.sessions, on_turn, ready)
        if step.refused:
            raise SessionRefusedError(step.refused)
        result.steps.append(step)
        return result
    n = 1
    while True:
        if server_max is not None and n > server_max:
            last = result.verdict.capacity if result.verdict else 0
            result.verdict = RampVerdict(False, last, "server_limit")
            break
        await wait_idle(opts)
        progress(f"ramp: {n} session(s)")
        step = await run_step(opts, speech, n, on_turn, ready)
        result.steps.append(step)
        ramp = [RampStep(x.sessions, p95_v2v(x), LIMIT_CODES.get(x.refused_code or 0)) for x in result.steps]
        result.verdict = ramp_verdict(ramp, ramp_budget(result), opts.max_sessions)
        p95 = p95_v2v(step)
        if p95 is not None:
            progress(f"ramp: {n} session(s): p95 voice-to-voice {p95:.0f} ms")
        if not result.verdict.go_on:
            break
        n += 1
    return result
