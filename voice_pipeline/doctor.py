"""``voice-pipeline doctor``: this machine, the settings chosen for it, and what it gives.

Prints the CPU (model, class, cores), the machine-dependent settings and why each was
chosen (:mod:`voice_pipeline.tuning`), the memory bandwidth and matmul speed that bound
the LLM here, and a few-second LLM micro-benchmark beside those floors:

* first token of a turn-sized prompt (system prompt + one question), cold (nothing
  cached) and with the system prompt in the prefix cache (as every turn after the first);
  its floor is the prefill's arithmetic, ``2 x parameters x prompt tokens`` at the
  measured matmul rate;
* milliseconds per generated token; its floor is reading every weight once per token,
  ``weight bytes / memory bandwidth`` (a 135M model's decode is memory-bound).

Bandwidth is a numpy copy of 256 MiB (bytes read + written per second, one thread, the
best of five); the matmul rate is torch on model-shaped matrices (576 x 1536) with the
LLM's thread count, the faster of float32 and the LLM's dtype. Both are measured here, now, so the floors move
with the machine and its load. Measuring code is kept apart from the pure formatting
(:func:`format_report`), which the tests check.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm.base import LLM, ChatMessage
from voice_pipeline.tuning import Tuning

BANDWIDTH_MIB = 256
QUESTIONS = (
    "What is the capital of France?",
    "How many days are there in a week?",
    "What color is the sky on a clear day?",
    "Which animal says moo?",
    "What do bees make?",
    "How many legs does a spider have?",
    "What is the opposite of hot?",
    "Where does the sun rise?",
)
DECODE_PROMPT = "Tell me a short story about a cat."
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True, slots=True)
class Floors:
    """What the machine allows: memory bandwidth and matmul rate, measured now."""

    copy_gb_s: float
    matmul_gflops: float
    matmul_dtype: str
    matmul_threads: int


@dataclass(frozen=True, slots=True)
class LLMFigures:
    prompt_tokens: int
    first_token_cold_ms: float
    first_token_warm_ms: float
    warm_cached_tokens: int | None
    ms_per_token: float
    decoded_tokens: int
    #: the model's parameters, those of its token embedding, and its weight bytes in the
    #: dtype it runs in (None: not known, e.g. a remote server)
    parameters: int | None
    embedding_parameters: int | None
    weight_bytes: int | None


@dataclass(frozen=True, slots=True)
class DoctorReport:
    tuning: Tuning
    floors: Floors
    llm: LLMFigures | None
    engine_start_s: float | None = None

    def prefill_floor_ms(self) -> float | None:
        if self.llm is None or self.llm.parameters is None or self.floors.matmul_gflops <= 0:
            return None
        per_token = self.llm.parameters - (self.llm.embedding_parameters or 0)
        flops = 2 * per_token * self.llm.prompt_tokens + 2 * (self.llm.embedding_parameters or 0)
        return flops / (self.floors.matmul_gflops * 1e9) * 1e3

    def decode_floor_ms(self) -> float | None:
        if self.llm is None or self.llm.weight_bytes is None or self.floors.copy_gb_s <= 0:
            return None
        return self.llm.weight_bytes / (self.floors.copy_gb_s * 1e9) * 1e3

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": "voice-pipeline.doctor/1",
            "machine": self.tuning.as_dict(),
            "floors": asdict(self.floors),
            "llm": None if self.llm is None else asdict(self.llm),
            "engine_start_s": self.engine_start_s,
            "prefill_floor_ms": _round(self.prefill_floor_ms()),
            "decode_floor_ms": _round(self.decode_floor_ms()),
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


# ------------------------------------------------------------ measuring


def copy_bandwidth_gb_s(mib: int = BANDWIDTH_MIB, reps: int = 5) -> float:
    """Bytes read + written per second by a numpy copy (one thread), the best of ``reps``."""
    src = np.ones(mib * 2**20 // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best / 1e9


def matmul_gflops(dtype: str, threads: int, seconds: float = 0.5) -> float:
    """torch matmul rate on SmolLM2-shaped matrices (64 x 576 @ 576 x 1536) in ``dtype``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        tdtype = getattr(torch, dtype)
        a = torch.randn(64, 576).to(tdtype)
        b = torch.randn(576, 1536).to(tdtype)
        torch.mm(a, b)  # first-call set-up
        n = 0
        t0 = time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds:
            torch.mm(a, b)
            n += 1
        return 2 * 64 * 576 * 1536 * n / elapsed / 1e9
    finally:
        torch.set_num_threads(before)


def measure_floors(tuning: Tuning, bandwidth_mib: int = BANDWIDTH_MIB) -> Floors:
    """Bandwidth, and the faster matmul of float32 and the LLM's dtype: the compute floor is
    what the CPU can do, not what a dtype it lacks hardware for makes of it (bf16 on AVX2
    falls back to a path ~40x slower than float32 there)."""
    rates = {dtype: matmul_gflops(dtype, tuning.llm_threads) for dtype in {"float32", tuning.dtype}}
    best = max(rates, key=rates.__getitem__)
    return Floors(
        copy_gb_s=round(copy_bandwidth_gb_s(bandwidth_mib), 2),
        matmul_gflops=round(rates[best], 1),
        matmul_dtype=best,
        matmul_threads=tuning.llm_threads,
    )


def model_parameters(model_dir: Path) -> tuple[int, int] | None:
    """(parameters, of which the token embedding) in the folder's safetensors files, read
    from their headers only. A prefill multiplies every token by all weights except the
    embedding (a lookup; as the tied output layer it runs for the last token only)."""
    total = embedding = 0
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with path.open("rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(size))
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            n = math.prod(entry["shape"])
            total += n
            if name.endswith("embed_tokens.weight"):
                embedding = n
    return (total, embedding) if total else None


async def _first_token(llm: LLM, messages: Sequence[ChatMessage], request_id: str) -> tuple[float, Any]:
    t0 = time.perf_counter()
    stream = llm.stream(messages, request_id)
    try:
        async for delta in stream:
            return (time.perf_counter() - t0) * 1000, delta
    finally:
        await stream.aclose()
    raise RuntimeError("the LLM returned no token")


async def llm_figures(
    llm: LLM,
    system_prompt: str,
    *,
    reps: int = 5,
    parameters: tuple[int, int] | None = None,
    dtype: str = "float32",
) -> LLMFigures:
    """The micro-benchmark: first token cold and warm (medians of ``reps``), ms per token."""
    system = ChatMessage("system", system_prompt)
    await _first_token(llm, [system, ChatMessage("user", "Hello.")], "doctor-warm-up")
    cold: list[float] = []
    warm: list[float] = []
    cached: list[int] = []
    prompt_tokens = 0
    stamp = time.monotonic_ns()
    for i in range(reps):
        question = ChatMessage("user", QUESTIONS[i % len(QUESTIONS)])
        unique = ChatMessage("system", f"Session {stamp}-{i}. {system_prompt}")
        ms, _ = await _first_token(llm, [unique, question], f"doctor-cold-{stamp}-{i}")
        cold.append(ms)
        ms, first = await _first_token(llm, [system, question], f"doctor-warm-{stamp}-{i}")
        warm.append(ms)
        prompt_tokens = first.prompt_tokens or prompt_tokens
        if first.cached_tokens is not None:
            cached.append(first.cached_tokens)
    times: list[float] = []
    tokens = 0
    async for delta in llm.stream([system, ChatMessage("user", DECODE_PROMPT)], f"doctor-decode-{stamp}"):
        times.append(time.perf_counter())
        tokens += delta.num_tokens
    first_tokens = 1
    per_token = (times[-1] - times[0]) / max(1, tokens - first_tokens) * 1000 if len(times) > 1 else math.nan
    return LLMFigures(
        prompt_tokens=prompt_tokens,
        first_token_cold_ms=round(statistics.median(cold), 1),
        first_token_warm_ms=round(statistics.median(warm), 1),
        warm_cached_tokens=round(statistics.median(cached)) if cached else None,
        ms_per_token=round(per_token, 1),
        decoded_tokens=tokens,
        parameters=None if parameters is None else parameters[0],
        embedding_parameters=None if parameters is None else parameters[1],
        weight_bytes=None if parameters is None else parameters[0] * _DTYPE_BYTES.get(dtype, 4),
    )


def llm_floors(floors: Floors, parameters: tuple[int, int] | None, dtype: str) -> dict[str, float | None]:
    """The LLM link's floors on this machine: prefill ms per prompt token (arithmetic at the
    matmul rate) and ms per generated token (weights / bandwidth). None: model unknown."""
    if parameters is None:
        return {"prefill_ms_per_token": None, "decode_ms_per_token": None}
    total, embedding = parameters
    prefill = 2 * (total - embedding) / (floors.matmul_gflops * 1e9) * 1e3 if floors.matmul_gflops else None
    decode = total * _DTYPE_BYTES.get(dtype, 4) / (floors.copy_gb_s * 1e9) * 1e3 if floors.copy_gb_s else None
    return {"prefill_ms_per_token": _round3(prefill), "decode_ms_per_token": _round3(decode)}


def _round3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


# ------------------------------------------------------------ printing (pure)


def _row(name: str, ms: float, floor: float | None, why: str) -> str:
    if floor is None or floor <= 0:
        return f"  {name:<38}{ms:>9.1f} ms{'-':>11}{'':>8}   {why}"
    return f"  {name:<38}{ms:>9.1f} ms{floor:>8.1f} ms{ms / floor:>7.1f}x   {why}"


def format_report(report: DoctorReport) -> str:
    t, f = report.tuning, report.floors
    cpu = t.cpu
    lines = [f"machine:  {cpu.model}; class {cpu.class_label}; {cpu.cores} usable core(s); {cpu.machine}"]
    if cpu.native_class is not None:
        capped = f"caps this {cpu.native_class} CPU at {cpu.cpu_class}"
        lines.append(f"          emulated: {cpu.emulation} {capped}; every figure below is emulated")
    lines.append("settings:")
    for c in t.choices:
        lines.append(f"  {c.key:<20} {c.value!s:<10} {c.source}: {c.reason}")
    lines.append(
        f"floors:   memory copy {f.copy_gb_s:.1f} GB/s (numpy, 1 thread, read + write); "
        f"matmul {f.matmul_gflops:.0f} GFLOPS ({f.matmul_dtype}, {f.matmul_threads} thread(s))"
    )
    llm = report.llm
    if llm is None:
        lines.append("llm:      not measured (--no-llm)")
        return "\n".join(lines)
    head = "llm:     " if cpu.native_class is None else f"llm ({cpu.class_label}):"
    if report.engine_start_s is not None:
        head += f" engine started in {report.engine_start_s:.1f} s;"
    if llm.parameters is not None and llm.weight_bytes is not None:
        head += f" {llm.parameters / 1e6:.1f} M parameters = {llm.weight_bytes / 1e6:.0f} MB in {t.dtype}"
    cached = "" if llm.warm_cached_tokens is None else f"{llm.warm_cached_tokens} tokens from the cache"
    lines += [
        head,
        f"  {'':<38}{'measured':>12}{'floor':>11}{'ratio':>8}",
        _row(
            f"first token, {llm.prompt_tokens}-token prompt, cold",
            llm.first_token_cold_ms,
            report.prefill_floor_ms(),
            "prefill arithmetic / matmul rate",
        ),
        _row("first token, system prompt cached", llm.first_token_warm_ms, None, cached),
        _row(
            f"per generated token ({llm.decoded_tokens} tokens)",
            llm.ms_per_token,
            report.decode_floor_ms(),
            "weight bytes / memory bandwidth",
        ),
    ]
    return "\n".join(lines)
