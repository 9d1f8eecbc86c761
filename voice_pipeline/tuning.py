"""Settings that fit the machine: CPU features -> LLM dtype, thread budgets, KV block size.

Pure: :func:`choose` turns the machine's :class:`~voice_pipeline.cpu.CPUInfo` (read by
:func:`voice_pipeline.cpu.this_cpu`) and the config into a :class:`Tuning` -- every
machine-dependent value with the reason it was chosen. A value set explicitly in the
config always wins; only the ``auto`` values (``llm.dtype: auto``,
``llm.threads: 0``, ``llm.kv_block_tokens: 0``, ``asr.cpu_threads: 0``, ``asr.num_workers:
0``) are chosen here.

The rules, and what they rest on (README "Thread budgets"; measurements on 2-core EPYCs, 2026-11):

============================  ==========================================================
``llm.dtype``                 bfloat16 only where the CPU computes it natively
                              (``avx512_bf16`` or ``amx_bf16``; ``bf16`` on Arm), else
                              float32. On a 2-core AVX2 EPYC bf16 fell back to slow
                              kernels: first token 1110-1240 ms vs 216-311 ms in float32.
``llm.threads``               1 OpenMP thread up to 3 cores (2 threads were faster alone
                              but slowed Whisper and Piper beside them on 2 cores);
                              from 4 cores half of them (not measured here: a rule).
``asr.cpu_threads``           2 on 2+ cores with AVX-512 (measured); 1 on AVX2 and older
                              (on a 2-core AVX2 EPYC one thread decoded a 3 s question in
                              158 ms alone, two in 209; beside the LLM 237 vs 250) and on
                              a single core.
``asr.num_workers``           2 on 2+ cores: two Whisper decodes may run at once. Sessions
                              that end their turns together then decode side by side
                              instead of queueing, and a pause's decode need not wait
                              for a partial still running.
                              4 sessions on a 2-core AVX-512 BF16 EPYC, pooled over 6-7
                              runs: v2v p95 842 vs 953 ms, endpointing p95 415 vs 576
                              (p50 +24 ms); AVX2 emulated v2v p95 1058 vs 1263 (session
                              22, docs/measurements.md). 1 on a single core.
``turn.model_start``          ``auto``: ``early`` on AVX2 and older -- there the words come
                              back 300-500 ms into a pause and a model started after them
                              was never back in time (``p_complete`` null in every turn);
                              started at the pause on its own core (the ASR has the other)
                              its 150-170 ms are done when the words are; its verdict is
                              used as with ``words``. ``words`` on AVX-512, where
                              the words are back in ~150 ms and the model beside the decode
                              cost complete questions 60-100 ms (README "Turn-taking").
``llm.kv_block_tokens``       32 on every x86 CPU: vLLM's CPU default (128) never reuses
                              a system prompt plus a short question; 16 has no kernel
                              (fails to start); 32 measured best (docs/bench.md).
``llm.compile``               torch.compile on AVX-512 BF16 and AVX2 (:data:`COMPILE_CLASSES`):
                              the eager step is half Python and op dispatch (py-spy);
                              compiled, 20 -> 14-15 ms per token (bf16) and 35-39 ->
                              29-34 (AVX2 emulated, float32). The first start on a
                              machine compiles (70-100 s); later ones load vLLM's cache
                              (+2-10 s bf16, +12-16 s float32). Eager elsewhere (not
                              measured).
============================  ==========================================================

What the machine is -- its CPU class, cores and any emulation -- is :mod:`voice_pipeline.cpu`.
"""

from __future__ import annotations

import enum
import typing
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tts.chunker import DEFAULT_FIRST_CHUNK_WORDS
from voice_pipeline.cpu import CPUClass, CPUInfo, this_cpu

if TYPE_CHECKING:
    from voice_pipeline.config import ASRConfig, LLMConfig, TurnConfig

Dtype = typing.Literal["auto", "bfloat16", "float32", "float16"]
Compile = typing.Literal["auto", "eager", "compile"]


# ------------------------------------------------------------ the choices


class Source(enum.StrEnum):
    CONFIG = "config"  # set explicitly: it wins
    MACHINE = "machine"  # auto: chosen for this CPU


@dataclass(frozen=True, slots=True)
class Choice:
    key: str  # "llm.dtype"
    value: str | int
    source: Source
    reason: str


#: tokens per KV block chosen on CPUs (multiples of 32 are what vLLM's CPU kernels take)
CPU_KV_BLOCK_TOKENS = 32
#: cores up to which the LLM engine gets one OpenMP thread (2 spin against Whisper/Piper)
ONE_LLM_THREAD_UP_TO_CORES = 3
#: CPU classes whose engine decodes with torch.compile by default, and why (README
#: "A leaner engine step"; vLLM's own compile cache makes starts after the first cheap)
COMPILE_CLASSES: dict[CPUClass, str] = {
    CPUClass.AVX512_BF16: "torch.compile: 20 -> 14-15 ms per token, start +2-10 s once cached",
    CPUClass.AVX2: "torch.compile: 35-39 -> 29-34 ms per token (emulated), start +12-16 s once cached",
}


@dataclass(frozen=True, slots=True)
class Tuning:
    """The machine-dependent settings, resolved: apply them with :meth:`llm` / :meth:`asr`."""

    cpu: CPUInfo
    dtype: str
    llm_threads: int
    asr_threads: int
    kv_block_tokens: int
    choices: tuple[Choice, ...]
    #: "vllm" (in process: the llm values are used) or "remote" (they are not)
    llm_engine: str = "vllm"
    #: when the audio turn model runs in a pause ("words", "early" or "pause"; ``turn.model_start``)
    turn_model_start: str = "words"
    #: the vLLM decode step: "eager" or "compile" (torch.compile)
    compile: str = "eager"
    #: Whisper decodes that may run at once (``asr.num_workers``)
    asr_workers: int = 1

    def llm(self, cfg: LLMConfig) -> LLMConfig:
        dtype = typing.cast(Dtype, self.dtype)
        compile_ = typing.cast(Compile, self.compile)
        return replace(
            cfg,
            dtype=dtype,
            threads=self.llm_threads,
            kv_block_tokens=self.kv_block_tokens,
            compile=compile_,
        )

    def asr(self, cfg: ASRConfig) -> ASRConfig:
        return replace(cfg, cpu_threads=self.asr_threads, num_workers=self.asr_workers)

    def summary(self) -> str:
        """The one line logged at start."""
        parts = [f"{c.key}={c.value} ({c.reason})" for c in self.choices]
        if self.llm_engine != "vllm":
            parts.append(f"llm: {self.llm_engine} server (its own settings)")
        return f"machine: {self.cpu.label}; " + "; ".join(parts)

    def settings_label(self) -> str:
        """``bfloat16, 1 LLM thread, KV blocks of 32 tokens, 2 ASR threads`` (beside figures)."""
        asr = f"{self.asr_threads} ASR thread{'s' * (self.asr_threads != 1)}"
        if self.llm_engine != "vllm":
            return f"LLM on a {self.llm_engine} server, {asr}"
        threads = f"{self.llm_threads} LLM thread{'s' * (self.llm_threads != 1)}"
        compiled = ", torch.compile" if self.compile == "compile" else ""
        return f"{self.dtype}{compiled}, {threads}, KV blocks of {self.kv_block_tokens} tokens, {asr}"

    def as_dict(self) -> dict[str, object]:
        local = self.llm_engine == "vllm"
        return {
            "cpu": self.cpu.as_dict(),
            "llm_engine": self.llm_engine,
            "llm_dtype": self.dtype if local else None,
            "llm_threads": self.llm_threads if local else None,
            "kv_block_tokens": self.kv_block_tokens if local else None,
            "llm_compile": self.compile if local else None,
            "asr_threads": self.asr_threads,
            "asr_workers": self.asr_workers,
            "choices": [
                {"key": c.key, "value": c.value, "source": str(c.source), "reason": c.reason}
                for c in self.choices
            ],
        }


def choose_dtype(cpu: CPUInfo, configured: str) -> Choice:
    if configured != "auto":
        return Choice("llm.dtype", configured, Source.CONFIG, "set in the config")
    if cpu.bf16_native:
        return Choice("llm.dtype", "bfloat16", Source.MACHINE, f"{cpu.cpu_class}: bf16 in hardware")
    return Choice(
        "llm.dtype", "float32", Source.MACHINE, f"{cpu.cpu_class}: no bf16 in hardware (bf16 is ~4x slower)"
    )


def choose_llm_threads(cpu: CPUInfo, configured: int) -> Choice:
    if configured > 0:
        return Choice("llm.threads", configured, Source.CONFIG, "set in the config")
    if cpu.cores <= ONE_LLM_THREAD_UP_TO_CORES:
        return Choice("llm.threads", 1, Source.MACHINE, f"{cpu.cores} cores: 1 leaves room for ASR and TTS")
    return Choice("llm.threads", cpu.cores // 2, Source.MACHINE, f"{cpu.cores} cores: half of them")


#: classes whose Whisper decode is fastest with one CTranslate2 thread, and that start the
#: turn model at the pause (beside the decode) rather than after the words
_SLOW_CLASSES = (CPUClass.AVX2, CPUClass.OLDER)


def choose_asr_threads(cpu: CPUInfo, configured: int) -> Choice:
    if configured > 0:
        return Choice("asr.cpu_threads", configured, Source.CONFIG, "set in the config")
    if cpu.cores == 1:
        return Choice("asr.cpu_threads", 1, Source.MACHINE, "1 core")
    if cpu.cpu_class in _SLOW_CLASSES:
        return Choice("asr.cpu_threads", 1, Source.MACHINE, f"{cpu.cpu_class}: 1 thread decodes faster")
    return Choice("asr.cpu_threads", 2, Source.MACHINE, f"{cpu.cores} cores")


def choose_asr_workers(cpu: CPUInfo, configured: int) -> Choice:
    if configured > 0:
        return Choice("asr.num_workers", configured, Source.CONFIG, "set in the config")
    if cpu.cores == 1:
        return Choice("asr.num_workers", 1, Source.MACHINE, "1 core")
    return Choice("asr.num_workers", 2, Source.MACHINE, "sessions that end turns together decode at once")


def choose_turn_model_start(cpu: CPUInfo, configured: str) -> Choice:
    if configured != "auto":
        return Choice("turn.model_start", configured, Source.CONFIG, "set in the config")
    if cpu.cpu_class in _SLOW_CLASSES and cpu.cores > 1:
        return Choice("turn.model_start", "early", Source.MACHINE, f"{cpu.cpu_class}: words come late")
    return Choice("turn.model_start", "words", Source.MACHINE, f"{cpu.cpu_class}: words come in time")


def choose_block(cpu: CPUInfo, configured: int) -> Choice:
    if configured > 0:
        return Choice("llm.kv_block_tokens", configured, Source.CONFIG, "set in the config")
    return Choice(
        "llm.kv_block_tokens",
        CPU_KV_BLOCK_TOKENS,
        Source.MACHINE,
        "CPU: smallest block with a kernel, so short prompts hit the prefix cache",
    )


def choose_compile(cpu: CPUInfo, configured: str) -> Choice:
    """torch.compile where it measurably paid (:data:`COMPILE_CLASSES`), else eager."""
    if configured != "auto":
        return Choice("llm.compile", configured, Source.CONFIG, "set in the config")
    if cpu.cpu_class in COMPILE_CLASSES:
        return Choice("llm.compile", "compile", Source.MACHINE, COMPILE_CLASSES[cpu.cpu_class])
    return Choice("llm.compile", "eager", Source.MACHINE, f"{cpu.cpu_class}: torch.compile not measured here")


def choose(cpu: CPUInfo, llm: LLMConfig, asr: ASRConfig, turn: TurnConfig | None = None) -> Tuning:
    """Every machine-dependent setting for ``cpu``; explicit config values win. With the
    remote LLM engine the ``llm.*`` values are resolved all the same (the remote server has
    its own) but left out of :attr:`Tuning.choices`, so the log line names only what is used."""
    dtype = choose_dtype(cpu, llm.dtype)
    threads = choose_llm_threads(cpu, llm.threads)
    asr_threads = choose_asr_threads(cpu, asr.cpu_threads)
    workers = choose_asr_workers(cpu, asr.num_workers)
    block = choose_block(cpu, llm.kv_block_tokens)
    compile_ = choose_compile(cpu, llm.compile)
    start = choose_turn_model_start(cpu, "auto" if turn is None else turn.model_start)
    asr_used = (asr_threads, workers)
    used = (dtype, threads, *asr_used, block, compile_) if llm.engine == "vllm" else asr_used
    if turn is not None and turn.semantic and turn.model != "none":
        used = (*used, start)
    return Tuning(
        cpu=cpu,
        dtype=str(dtype.value),
        llm_threads=int(threads.value),
        asr_threads=int(asr_threads.value),
        kv_block_tokens=int(block.value),
        choices=used,
        llm_engine=llm.engine,
        turn_model_start=str(start.value),
        compile=str(compile_.value),
        asr_workers=int(workers.value),
    )


def tuned_llm(cfg: LLMConfig) -> LLMConfig:
    """``cfg`` with its auto values resolved for this machine (engines call this)."""
    from voice_pipeline.config import ASRConfig

    return choose(this_cpu(), cfg, ASRConfig(cpu_threads=1)).llm(cfg)


def tuned_asr(cfg: ASRConfig) -> ASRConfig:
    from voice_pipeline.config import LLMConfig

    return choose(this_cpu(), LLMConfig(), cfg).asr(cfg)


#: an LLM this slow per generated token gets a 2-word first chunk (else 3): one word less to
#: wait for is worth a choppier first phrase only when a token costs this much (issue #18:
#: 17.5 ms per token on an AVX-512 BF16 EPYC, 38-55 on an AVX-512 BF16 Xeon with a third of
#: its memory bandwidth, 30-36 with AVX2 emulated there, 78 on a real AVX2 EPYC)
SLOW_TOKEN_MS = 25.0


def choose_first_chunk_words(configured: int | None, ms_per_token: float | None) -> int:
    """``tts.first_chunk_words``: as configured, else from the LLM's measured ms per token
    (2 from :data:`SLOW_TOKEN_MS` on, else 3; 3 when it was not measured)."""
    if configured is not None:
        return configured
    if ms_per_token is not None and ms_per_token >= SLOW_TOKEN_MS:
        return 2
    return DEFAULT_FIRST_CHUNK_WORDS


def choose_partial_interval(configured_ms: int, max_decode_ms: int, decode_ms: float | None) -> int:
    """``asr.partial_interval_ms`` for this machine: as configured, or 0 (no partials) where
    the warm-up's decode of a question (``decode_ms``, None: not measured) took longer than
    ``asr.partials_max_decode_ms`` (0: partials always).

    A partial is a preview, and the Whisper engine decodes one utterance at a time: a
    partial still running when the pause begins holds the pause's decode back, by up to a
    whole decode. On a 2-core AMD EPYC with AVX2 at half width (Zen 1; issue #18, 2026-12-04)
    a question's decode took ~345 ms (the encoder's 10 s window ~235 of it), and then
    (``benchmarks/bench_speculation.py --modes after,no-partials``, 20 questions each)
    partials made 4 more turns of 20 miss their words by the medium wait: voice-to-voice
    p50 / p95 977 / 1238 ms with partials, 920 / 1158 without. Where a decode takes ~150 ms
    (AVX-512, or AVX2 at full width) a collision costs little and the live transcript stays."""
    if max_decode_ms > 0 and decode_ms is not None and decode_ms > max_decode_ms:
        return 0
    return configured_ms
