"""Soak: one long conversation, simulated faster than real time; prints memory over time.

    .venv/bin/python benchmarks/soak.py --minutes 60            # the full hour (a few minutes)
    .venv/bin/python benchmarks/soak.py --minutes 3 --every 30  # quick look
    .venv/bin/python benchmarks/soak.py --minutes 60 --tracemalloc --json soak.json
    .venv/bin/python benchmarks/soak.py --minutes 60 --real     # real models, espeak-ng question

A :class:`~voice_pipeline.conversation.session.Session` talks to a simulated WebSocket client
through the server's own transport (:class:`WebSocketTransport` over an
:class:`Outbound` whose socket is the simulated client): the client speaks for a
second every 8 s, listens to the reply in (simulated) real time, reports what it
played every 100 ms, and every third turn speaks over the reply (a barge-in:
``audio.clear``, acknowledged with ``cleared``). The clock is a fake one moved
by the audio fed, so an hour of conversation takes a few minutes; the engines
are the fakes of ``tests/fakes.py`` (this measures the pipeline's bookkeeping,
not the models). With ``--real`` they are the real models and the user asks a
question spoken by espeak-ng each turn; the fake clock then waits (in real
time) for each reply to begin, as a caller would, so replies are heard.

Every ``--every`` simulated seconds it prints RSS, Python heap (with
``--tracemalloc``) and the length of every structure that could grow with the
length of a call: input history, ledger records, session turns and tasks, the
echo reference, the listener timeline, the transport's per-turn books, the
outbound queue, and the chat history (trimmed when sent by ``dialogue.history_max_tokens``).
Prints figures; asserts nothing (``tests/test_soak.py`` runs it shortened and checks
the structures stay bounded).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the fake engines

from fakes import FakeClock, Fakes, counting_executor, tone  # noqa: E402

from voice_pipeline.config import Config, load_config  # noqa: E402
from voice_pipeline.conversation.session import Session  # noqa: E402
from voice_pipeline.edge.outbound import Outbound  # noqa: E402
from voice_pipeline.engines import Engines  # noqa: E402
from voice_pipeline.server.transport import WebSocketTransport  # noqa: E402

RATE = 16000
OUT_RATE = 16000
CHUNK_S = 0.02
CYCLE_S = 8.0  # one turn every 8 s of conversation
SPEECH_S = 1.0
BARGE_AT_S, BARGE_S = 2.6, 1.2  # every third turn the user speaks over the reply
REPORT_EVERY_CHUNKS = 5  # a playback report every 100 ms
QUESTION = "What is the capital of France?"  # what the user says with --real


class SimulatedClient:
    """The far end of the WebSocket: plays reply audio in real time on the fake clock."""

    def __init__(self) -> None:
        self.queue: deque[list[int]] = deque()  # [turn_id, samples left]
        self.played = 0
        self.cleared: int | None = None  # a clear to acknowledge in the next report
        self.messages = 0
        self.audio_frames = 0
        self.awaiting: set[int] = set()  # turns transcribed, no reply audio or end yet
        self._turn = 0

    async def send(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            self.audio_frames += 1
            self.queue.append([self._turn, len(message) // 2])
            return
        self.messages += 1
        msg = json.loads(message)
        if msg["type"] == "transcript.final":
            self.awaiting.add(int(msg["turn_id"]))
        elif msg["type"] in ("assistant.audio", "turn.latency", "reply.interrupted", "turn.failed"):
            self.awaiting.discard(int(msg["turn_id"]))
        if msg["type"] == "assistant.audio":
            self._turn = int(msg["turn_id"])
        elif msg["type"] == "audio.clear":
            self.queue = deque(i for i in self.queue if i[0] != msg["turn_id"])
            self.cleared = int(msg["turn_id"])

    async def close(self, code: int = 1000, reason: str = "") -> None:
        pass

    def advance(self, seconds: float) -> None:
        budget = round(seconds * OUT_RATE)
        while budget and self.queue:
            n = min(budget, self.queue[0][1])
            self.queue[0][1] -= n
            budget -= n
            self.played += n
            if not self.queue[0][1]:
                self.queue.popleft()


@dataclasses.dataclass
class Sample:
    simulated_s: float
    wall_s: float
    rss_mb: float
    heap_mb: float | None
    sizes: dict[str, int]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(session: Session, transport: WebSocketTransport, out: Outbound) -> dict[str, int]:
    """Lengths of everything that could grow with the length of a call."""
    timeline = transport.timeline
    sizes = session.sizes()
    return {
        "turns_completed": session.ledger.turns,
        "ledger_records": len(session.ledger.records),
        "ledger_stage_samples": max((len(a.recent) for a in session.ledger.stages.values()), default=0),
        "input_chunks": sizes["input_chunks"],
        "session_turns_open": sizes["turns_open"],
        "session_replies": sizes["replies"],
        "session_tasks": sizes["tasks"],
        "echo_reference_chunks": sizes["echo_reference_chunks"],
        "timeline_chunks": len(timeline._chunks),
        "timeline_turns": len(timeline._folded),
        "timeline_cuts": len(timeline._cuts),
        "transport_turn_epochs": len(transport._epoch),
        "outbound_queue": len(out._queue),
        "asyncio_tasks": len(asyncio.all_tasks()),
        "history_messages": sizes["history_messages"],
    }


def scripts(speech: NDArray[np.float32]) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """One cycle of the user's microphone: ``speech`` then silence; and the same with the
    start of ``speech`` again over the reply (a barge-in)."""
    speech_s = len(speech) / RATE
    cycle_s = max(CYCLE_S, speech_s + 6.0)
    plain = np.zeros(round(cycle_s / CHUNK_S) * round(CHUNK_S * RATE), dtype=np.float32)
    plain[: len(speech)] = speech
    barge = plain.copy()
    at = round((speech_s + BARGE_AT_S - SPEECH_S) * RATE)
    over = speech[: round(BARGE_S * RATE)]
    barge[at : at + len(over)] = over
    return plain, barge


async def soak(
    minutes: float,
    *,
    every_s: float = 60.0,
    cfg: Config | None = None,
    engines: Engines | None = None,
    speech: NDArray[np.float32] | None = None,
    trace: bool = False,
    on_sample: Callable[[Sample], None] = lambda s: None,
) -> list[Sample]:
    """Run the simulated conversation for ``minutes`` of audio; one :class:`Sample` per ``every_s``.

    ``engines``: the engines to use (default: the fakes); ``speech``: what the user says each
    turn (16 kHz float32; default: a 1 s tone, which the fake VAD takes for speech).
    """
    cfg = cfg or load_config(None)
    clock = FakeClock()
    executor = counting_executor()
    client = SimulatedClient()
    out = Outbound(
        client, max_events=cfg.server.max_queued_events, max_audio_samples=2 * OUT_RATE, clock=clock
    )
    transport = WebSocketTransport(
        out, OUT_RATE, playback_reports=True, origin_ns=clock(), drain_grace_s=2.0, clock=clock
    )
    out.on_audio_sent = transport.audio_sent
    out.start()
    fakes = Fakes()
    session = Session(engines or fakes.engines(), cfg, transport, clock=clock)
    plain, barged = scripts(tone(SPEECH_S, RATE) if speech is None else speech)
    step = round(CHUNK_S * RATE)
    chunks = round(minutes * 60 / CHUNK_S)
    per_cycle = len(plain) // step
    sample_every = max(1, round(every_s / CHUNK_S))
    samples: list[Sample] = []
    if trace:
        tracemalloc.start()
    t0 = time.monotonic()
    try:
        for i in range(1, chunks + 1):
            cycle, k = divmod(i - 1, per_cycle)
            script = barged if cycle % 3 == 2 else plain
            chunk = script[k * step : (k + 1) * step]
            clock.advance(round(CHUNK_S * 1e9))
            client.advance(CHUNK_S)
            await session.push_audio(chunk, clock())
            if i % REPORT_EVERY_CHUNKS == 0:
                transport.report_playback(client.played, client.cleared)
                client.cleared = None
            await settle(executor)
            await first_audio(client)
            if i % per_cycle == 0:  # the fakes' own logs of every request are not the pipeline's
                for log in (fakes.llm.requests, fakes.llm.started, fakes.llm.finished, fakes.llm.aborted):
                    log.clear()
                fakes.tts.texts.clear()
            if i % sample_every == 0:
                gc.collect()
                heap = tracemalloc.get_traced_memory()[0] / 2**20 if trace else None
                s = Sample(
                    i * CHUNK_S, time.monotonic() - t0, rss_mb(), heap, measure(session, transport, out)
                )
                samples.append(s)
                on_sample(s)
    finally:
        await session.aclose()
        await out.aclose()
        if trace:
            tracemalloc.stop()
    return samples


async def first_audio(client: SimulatedClient, timeout_s: float = 30.0) -> None:
    """Hold the fake clock while a transcribed turn's reply has not begun (real engines
    take real time; the simulated user waits for an answer as a person would)."""
    deadline = time.monotonic() + timeout_s
    while client.awaiting and time.monotonic() < deadline:  # noqa: ASYNC110 -- real engines' work
        await asyncio.sleep(0.002)


async def settle(executor: Any) -> None:
    """Let the session's tasks run and the fake engines' worker threads come back."""
    for _ in range(3):
        await asyncio.sleep(0)
    deadline = time.monotonic() + 0.25
    while executor.pending and time.monotonic() < deadline:  # noqa: ASYNC110 -- worker threads
        await asyncio.sleep(0.0002)
    for _ in range(3):
        await asyncio.sleep(0)


def print_sample(s: Sample) -> None:
    heap = f"{s.heap_mb:7.1f}" if s.heap_mb is not None else "      -"
    sizes = " ".join(f"{k}={v}" for k, v in s.sizes.items())
    print(
        f"{s.simulated_s / 60:6.1f} min  wall {s.wall_s:6.1f} s  "
        f"rss {s.rss_mb:7.1f} MB  heap {heap} MB  {sizes}"
    )
    sys.stdout.flush()


async def real_soak(args: argparse.Namespace) -> list[Sample]:
    from speech import espeak

    from voice_pipeline.models import prepare_models

    cfg = load_config(None)
    engines = Engines.load(cfg, prepare_models(cfg, progress=print), progress=print)
    await engines.warm_up(cfg.dialogue.system_prompt)
    try:
        return await soak(
            args.minutes,
            every_s=args.every,
            cfg=cfg,
            engines=engines,
            speech=espeak(QUESTION),
            trace=args.tracemalloc,
            on_sample=print_sample,
        )
    finally:
        await engines.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0, help="simulated minutes of conversation")
    ap.add_argument("--every", type=float, default=60.0, help="print a sample every N simulated seconds")
    ap.add_argument("--tracemalloc", action="store_true", help="also measure the Python heap (slower)")
    ap.add_argument("--json", type=Path, help="write the samples here")
    ap.add_argument(
        "--real",
        action="store_true",
        help="the real models (Silero, Whisper, vLLM, Piper) and a spoken question (espeak-ng)",
    )
    args = ap.parse_args()
    if args.real:
        samples = asyncio.run(real_soak(args))
    else:
        samples = asyncio.run(
            soak(args.minutes, every_s=args.every, trace=args.tracemalloc, on_sample=print_sample)
        )
    from voice_pipeline.cpu import this_cpu

    print(f"machine: {this_cpu().label}; load average {os.getloadavg()[0]:.2f} at the end")
    if len(samples) >= 2:
        first, last = samples[0], samples[-1]
        print(
            f"RSS {first.rss_mb:.1f} MB at {first.simulated_s / 60:.1f} min -> {last.rss_mb:.1f} MB at "
            f"{last.simulated_s / 60:.1f} min ({last.rss_mb - first.rss_mb:+.1f} MB); "
            f"{last.sizes['turns_completed']} turns"
        )
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(s) for s in samples], indent=1))


if __name__ == "__main__":
    main()
