"""/v1/realtime next to /ws: time from the end of speech to the first reply audio.

    .venv/bin/python benchmarks/bench_realtime.py [--turns 10] [--config FILE] [--json out.json]

Starts ``voice-pipeline serve`` (default config, or ``--config``) in a subprocess on
a free port and talks to it from this process, as a microphone would: the same
espeak-ng question at 24 kHz PCM16, in 20 ms chunks at real-time pace, once on
``/ws`` (binary frames, ``sample_rate: 24000``, reply audio at 24 kHz) and once on
``/v1/realtime`` (``input_audio_buffer.append``, the server's default session), in
alternating order, one session per turn. Measured on the client: the question's
acoustic end (its last sample over -50 dBFS, at the time a live microphone would
have captured it) -> the first reply audio received (``/ws``: the first binary
audio frame; ``/v1/realtime``: the first ``response.output_audio.delta``). Also
printed: the server's own ledger ``voice_to_voice`` of each turn (``turn.latency``
/ ``voice_pipeline.turn.latency``) and the pairwise difference per round.

Prints figures; asserts nothing. Name the machine beside any figure you publish
(the CPU class is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr
from websockets.asyncio.client import connect

os.environ.setdefault("HF_HUB_OFFLINE", "1")

RATE = 24000
CHUNK = RATE * 20 // 1000
QUESTIONS = [
    "What is the capital of France?",
    "How many days are there in a week?",
    "What color is the sky on a clear day?",
    "What do bees make?",
    "How many legs does a spider have?",
]


def espeak(text: str) -> np.ndarray:
    exe = shutil.which("espeak-ng")
    if exe is None:
        sys.exit("espeak-ng is needed: apt-get install espeak-ng")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "q.wav"
        subprocess.run([exe, "-v", "en-us+f3", "-s", "150", "-w", str(path), text], check=True)
        audio, sr = sf.read(path, dtype="float32")
    return np.asarray(soxr.resample(audio, sr, RATE, quality="HQ"), dtype=np.float32)


def cpu_class() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown CPU"
    flags = set(re.search(r"^flags\s*:(.*)$", info, re.M).group(1).split()) if "flags" in info else set()
    model = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
    isa = (
        "AVX-512 BF16"
        if "avx512_bf16" in flags
        else "AVX-512"
        if "avx512f" in flags
        else "AVX2"
        if "avx2" in flags
        else "no AVX2"
    )
    return f"{model.group(1).strip() if model else 'CPU'}, {isa}, {os.cpu_count()} cores"


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


class Turn:
    """One spoken question on one endpoint: when its speech ended, when audio came back."""

    def __init__(self, audio: np.ndarray, lead_s: float) -> None:
        lead = np.zeros(round(lead_s * RATE), np.float32)
        self.pcm = (
            np.clip(np.concatenate([lead, audio, np.zeros(RATE * 6, np.float32)]), -1, 1) * 32767
        ).astype("<i2")
        last = int(np.flatnonzero(np.abs(audio) > 0.003)[-1]) + 1  # acoustic end, -50 dBFS
        self.end_sample = len(lead) + last
        self.t0 = 0.0
        self.first_audio: float | None = None
        self.v2v_ms: float | None = None
        self.record: dict[str, Any] = {}
        self.done = asyncio.Event()

    @property
    def end_s(self) -> float:
        return self.t0 + self.end_sample / RATE

    def client_ms(self) -> float | None:
        return None if self.first_audio is None else (self.first_audio - self.end_s) * 1000

    async def stream(self, send: Any) -> None:
        loop = asyncio.get_running_loop()
        self.t0 = loop.time()
        for n, i in enumerate(range(0, len(self.pcm), CHUNK)):
            if self.done.is_set():
                return
            await send(self.pcm[i : i + CHUNK].tobytes())
            await asyncio.sleep(max(0.0, self.t0 + (n + 1) * CHUNK / RATE - loop.time()))

    def heard(self) -> None:
        if self.first_audio is None:
            self.first_audio = asyncio.get_running_loop().time()


async def ws_turn(port: int, turn: Turn) -> None:
    async with connect(f"ws://127.0.0.1:{port}/ws", max_size=None, compression=None) as ws:
        start = {"type": "start", "version": 1, "sample_rate": RATE, "format": "pcm16",
                 "output_sample_rate": RATE, "capabilities": {"playback_reports": False}}  # fmt: skip
        await ws.send(json.dumps(start))
        while json.loads(await ws.recv())["type"] != "ready":
            pass

        async def read() -> None:
            async for msg in ws:
                if isinstance(msg, bytes):
                    turn.heard()
                elif (m := json.loads(msg))["type"] == "turn.latency":
                    turn.record = m["record"]
                    turn.v2v_ms = m["record"]["stages_ms"].get("voice_to_voice")
                    turn.done.set()
                    return

        reader = asyncio.create_task(read())
        await turn.stream(ws.send)
        await asyncio.wait_for(reader, 60)


async def realtime_turn(port: int, turn: Turn) -> None:
    async with connect(
        f"ws://127.0.0.1:{port}/v1/realtime?model=bench", max_size=None, compression=None
    ) as ws:
        while json.loads(await ws.recv())["type"] != "session.created":
            pass

        async def read() -> None:
            async for msg in ws:
                m = json.loads(msg)
                if m["type"] == "response.output_audio.delta":
                    turn.heard()
                elif m["type"] == "voice_pipeline.turn.latency" and m["response_id"]:
                    turn.record = m["record"]
                    turn.v2v_ms = m["record"]["stages_ms"].get("voice_to_voice")
                    turn.done.set()
                    return

        async def send(chunk: bytes) -> None:
            event = {"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()}
            await ws.send(json.dumps(event))

        reader = asyncio.create_task(read())
        await turn.stream(send)
        await asyncio.wait_for(reader, 60)


ENDPOINTS = {"/ws": ws_turn, "/v1/realtime": realtime_turn}


def start_server(config: Path | None) -> tuple[subprocess.Popen[str], int]:
    cmd = [sys.executable, "-m", "voice_pipeline.cli", "serve", "--port", "0", "--rate-limit", "0"]
    if config is not None:
        cmd += ["--config", str(config)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"open http://127\.0\.0\.1:(\d+)/", line)
        if m:
            return proc, int(m.group(1))
    sys.exit("the server did not start")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=10, help="rounds (one turn on each endpoint per round)")
    ap.add_argument("--config", type=Path, help="the server's config file")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    clips = [espeak(q) for q in QUESTIONS]
    load_before = os.getloadavg()
    print(f"starting voice-pipeline serve ({cpu_class()}) ...", file=sys.stderr)
    proc, port = start_server(args.config)
    results: dict[str, list[tuple[float | None, float | None]]] = {e: [] for e in ENDPOINTS}
    records: dict[str, list[dict[str, Any]]] = {e: [] for e in ENDPOINTS}
    try:
        for run in ENDPOINTS.values():  # warm-up, not counted
            await run(port, Turn(clips[0], 0.5))
        t0 = time.monotonic()
        for i in range(args.turns):
            order = list(ENDPOINTS) if i % 2 == 0 else list(reversed(ENDPOINTS))
            row = []
            for name in order:
                turn = Turn(clips[i % len(clips)], 0.5)
                await ENDPOINTS[name](port, turn)
                results[name].append((turn.client_ms(), turn.v2v_ms))
                records[name].append(turn.record)
                row.append(
                    f"{name} {turn.client_ms() or float('nan'):6.0f} ms (ledger {turn.v2v_ms or 0:5.0f})"
                )
            print(f"round {i + 1:>2}: " + "   ".join(row), file=sys.stderr)
        elapsed = time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    load_after = os.getloadavg()
    print(f"\nmachine: {cpu_class()}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
          f"{args.turns} rounds in {elapsed:.0f} s")  # fmt: skip
    print("end of speech -> first reply audio at the client, ms (and the server's ledger voice_to_voice)")
    print(f"{'endpoint':<14}{'p50':>7}{'p90':>7}{'mean':>7}   {'ledger p50':>10}{'p90':>7}")
    for name, rows in results.items():
        client = [c for c, _ in rows if c is not None]
        ledger = [v for _, v in rows if v is not None]
        mean = float(np.mean(client)) if client else float("nan")
        print(
            f"{name:<14}{pct(client, 50):>7.0f}{pct(client, 90):>7.0f}{mean:>7.0f}"
            f"   {pct(ledger, 50):>10.0f}{pct(ledger, 90):>7.0f}"
        )
    print("ledger stages p50, ms (and how often the LLM started on the speculative transcript)")
    stages = ("endpointing", "asr_final", "llm_first_token", "first_clause", "tts_first_audio", "transport")
    print(f"{'endpoint':<14}" + "".join(f"{s[:12]:>13}" for s in stages) + f"{'prefetched':>12}")
    for name, recs in records.items():
        cells = [pct([r["stages_ms"][s] for r in recs if s in r.get("stages_ms", {})], 50) for s in stages]
        hits = sum(bool(r.get("llm", {}).get("prefetched")) for r in recs)
        print(f"{name:<14}" + "".join(f"{c:>13.0f}" for c in cells) + f"{hits:>9}/{len(recs)}")
    pairs = [
        (r[0], w[0]) for r, w in zip(results["/v1/realtime"], results["/ws"], strict=True) if r[0] and w[0]
    ]
    diffs = [r - w for r, w in pairs]
    print(f"/v1/realtime - /ws per round: median {pct(diffs, 50):+.0f} ms, p10 {pct(diffs, 10):+.0f}, "
          f"p90 {pct(diffs, 90):+.0f} ({len(diffs)} rounds)")  # fmt: skip
    if args.json:
        doc = {"machine": cpu_class(), "results": results, "records": records, "diffs_ms": diffs}
        args.json.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
