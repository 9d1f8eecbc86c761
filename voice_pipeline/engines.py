"""The loaded models, built once and shared by every session."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from asr.base import ASREngine
from asr.load import EngineLoad
from llm.base import LLM, ChatMessage
from tts.base import TTS
from vad.base import VAD, TurnModel
from voice_pipeline.config import Config
from voice_pipeline.cpu import this_cpu
from voice_pipeline.models import ModelPaths
from voice_pipeline.tuning import Tuning, choose

if TYPE_CHECKING:
    from voice_pipeline.telemetry.export import Telemetry

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: LLM requests the warm-up makes; the faster pace of them is :attr:`Engines.llm_ms_per_token`
WARM_UP_LLM_RUNS = 2
#: what the warm-up's ASR decode hears (in the TTS voice): a short question, as users ask
WARM_UP_QUESTION = "What is the capital of France?"


def tune(cfg: Config, progress: Callable[[str], None]) -> Tuning:
    """The settings chosen for this machine (explicit config values win), said once."""
    tuning = choose(this_cpu(), cfg.llm, cfg.asr, cfg.turn)
    log.info("%s", tuning.summary())
    progress(tuning.summary())
    return tuning


def default_speculation_limit(cores: int | None = None) -> int:
    """Concurrent speculative requests a machine has room for: one per two cores, at least one."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // 2)


class SpeculationBudget:
    """How many speculative LLM requests may run at once, over every session of a process.

    With several sessions, speculative work competes with real replies for the same
    cores; beyond the cap a pause is not speculated on and the reply is computed after
    the endpoint (as without speculation). ``limit`` 0 = no cap.
    """

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self.limit = limit
        self.running = 0

    @classmethod
    def for_machine(cls) -> SpeculationBudget:
        return cls(default_speculation_limit())

    @property
    def has_room(self) -> bool:
        return not self.limit or self.running < self.limit

    def try_acquire(self) -> bool:
        if self.limit and self.running >= self.limit:
            return False
        self.running += 1
        return True

    def release(self) -> None:
        self.running = max(0, self.running - 1)


@dataclass(slots=True)
class Engines:
    vad: VAD
    asr: ASREngine
    llm: LLM
    tts: TTS
    #: the audio turn-completion model; None = the end-of-turn policy uses the words alone
    turn: TurnModel | None = None
    #: the machine-dependent settings the engines were built with (None: built by hand)
    tuning: Tuning | None = None
    #: how many speculative replies may run at once over every session sharing these engines
    speculation: SpeculationBudget = field(default_factory=SpeculationBudget.for_machine)
    #: where every session's turns are traced and measured (None: telemetry is not configured)
    telemetry: Telemetry | None = None
    #: the LLM's ms per generated token, measured by :meth:`warm_up` (None: not measured)
    llm_ms_per_token: float | None = None
    #: ms the ASR took for a spoken question's partial decode at :meth:`warm_up` (None: not measured)
    asr_decode_ms: float | None = None
    #: the decodes on the ASR engine now, over every session (partials wait for an idle engine)
    asr_load: EngineLoad = field(default_factory=EngineLoad)

    @classmethod
    def load(cls, cfg: Config, paths: ModelPaths, progress: Callable[[str], None]) -> Engines:
        from asr import build_asr
        from llm import build_llm
        from tts import build_tts
        from vad import build_turn_model, build_vad

        def step(name: str, build: Callable[[], _T]) -> _T:
            t0 = time.monotonic()
            progress(f"loading {name} ...")
            engine = build()
            progress(f"loaded {name} in {time.monotonic() - t0:.1f} s")
            return engine

        from voice_pipeline.telemetry.setup import start_telemetry

        telemetry = start_telemetry(cfg)  # first: a bad OTEL_* variable fails before any model loads
        tuning = tune(cfg, progress)
        vad = step(
            f"VAD ({cfg.vad.engine})", lambda: build_vad(cfg.vad, cfg.audio.pipeline_rate_hz, paths.vad)
        )
        asr = step(f"ASR ({cfg.asr.engine})", lambda: build_asr(tuning.asr(cfg.asr), paths.asr))
        tts = step(f"TTS ({cfg.tts.engine})", lambda: build_tts(cfg.tts, paths.tts))
        llm = step(f"LLM ({cfg.llm.engine})", lambda: build_llm(tuning.llm(cfg.llm), paths.llm))
        turn = None
        if cfg.turn.semantic and cfg.turn.model != "none":
            turn = step(f"turn model ({cfg.turn.model})", lambda: build_turn_model(cfg.turn, paths.turn))
        limit = cfg.dialogue.speculative_limit or default_speculation_limit()
        return cls(
            vad=vad, asr=asr, llm=llm, tts=tts, turn=turn, tuning=tuning,
            speculation=SpeculationBudget(limit), telemetry=telemetry,
        )  # fmt: skip

    async def warm_up(self, system_prompt: str = "You are a helpful voice assistant.") -> None:
        """One small request through each engine, so the first user turn does not pay
        first-call costs: vLLM (it skips its own warm-up in eager mode; the first request
        after start was 60-100 ms slower), Piper and Whisper (onnxruntime and CTranslate2
        allocate on first use), the VAD and the turn model. Every place the pipeline starts calls this
        before the first session: ``serve``, ``run``, the benchmarks."""
        import asyncio

        import numpy as np

        # the LLM: a turn-shaped request, generated to its end (prefill and decode both run),
        # twice: the first pays first-call costs, and interference only ever slows a run down,
        # so the faster pace of the two is the steadier measure (one run alone read 41-64 ms
        # per token across starts on one Xeon)
        messages = [ChatMessage("system", system_prompt), ChatMessage("user", "Say hello.")]
        paces = [await self._llm_pace(messages, n) for n in range(WARM_UP_LLM_RUNS)]
        measured = [p for p in paces if p is not None]
        # the decode's pace (what the reply's first chunk waits for)
        self.llm_ms_per_token = min(measured) if measured else None
        log.info("LLM at warm-up: %s ms per generated token", self.llm_ms_per_token)
        await asyncio.to_thread(self.asr.transcribe, np.zeros(self.asr.sample_rate_hz // 2, np.float32))
        self.asr_decode_ms = decode_ms = await asyncio.to_thread(self._asr_pace)  # Piper's first call too
        log.info("ASR at warm-up: %s ms for a question's partial decode", decode_ms and round(decode_ms))
        vad = self.vad.stream()
        await asyncio.to_thread(vad.push, np.zeros(self.vad.frame_samples * 4, np.float32))
        if self.turn is not None:
            await asyncio.to_thread(self.turn.p_complete, np.zeros(self.turn.sample_rate_hz // 2, np.float32))

    def _asr_pace(self) -> float | None:
        """ms of the faster of two partial decodes of a spoken question (the TTS voice's), as
        the partials of a turn cost; None if the TTS gave no audio."""
        import numpy as np

        from voice_pipeline.audio import resample

        speech = self.tts.synthesize(WARM_UP_QUESTION)
        if speech.size == 0:
            return None
        voiced = speech.astype(np.float32) / 32768.0
        audio = resample(voiced, self.tts.sample_rate_hz, self.asr.sample_rate_hz)
        times = []
        for _ in range(2):
            start = time.monotonic_ns()
            self.asr.transcribe_partial(audio)
            times.append((time.monotonic_ns() - start) / 1e6)
        return min(times)

    async def _llm_pace(self, messages: list[ChatMessage], n: int) -> float | None:
        """ms per generated token of one request, from its first delta on (None: too short)."""
        import contextlib

        stream = self.llm.stream(messages, f"warm-up-{id(self)}-{n}-{time.monotonic_ns()}")
        first_ns, last_ns, after_first = 0, 0, 0  # tokens after the first delta
        async with contextlib.aclosing(stream):
            async for delta in stream:
                last_ns = time.monotonic_ns()
                after_first += delta.num_tokens if first_ns else 0
                first_ns = first_ns or last_ns
        return (last_ns - first_ns) / 1e6 / after_first if after_first >= 3 else None

    async def aclose(self) -> None:
        if self.telemetry is not None:  # the last spans and metrics go out (flush_timeout_s at most)
            import asyncio

            await asyncio.to_thread(self.telemetry.shutdown)
        await self.llm.aclose()
        if self.turn is not None:
            self.turn.close()
        self.tts.close()
        self.asr.close()
        self.vad.close()
