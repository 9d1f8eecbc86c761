"""Warm-up, judged by what it does: every real engine has served a request (and the LLM has
the system prompt in its prefix cache) before the first session runs.

The engines are the test session's real ones, each behind a thin wrapper that records the
calls it passes on; ``voice-pipeline run`` is driven in process with them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from fakes import FakeLLM
from numpy.typing import NDArray
from speech import espeak

from asr.base import ASREngine, MoreAudio, Transcription
from llm.base import LLM, ChatMessage, LLMDelta, LLMHealth, PrefillResult
from tts.base import TTS
from vad.base import VAD, VADStream
from voice_pipeline.config import Config
from voice_pipeline.conversation.wiring import chunking, turn_settings
from voice_pipeline.engines import Engines
from voice_pipeline.tuning import choose_first_chunk_words

pytestmark = pytest.mark.real_models


class Calls:
    def __init__(self) -> None:
        self.log: list[str] = []


class CountedLLM:
    def __init__(self, inner: LLM, calls: Calls) -> None:
        self._inner, self._calls = inner, calls
        self.first_deltas: list[LLMDelta] = []

    async def stream(
        self, messages: Sequence[ChatMessage], request_id: str
    ) -> AsyncGenerator[LLMDelta, None]:
        self._calls.log.append("llm")
        first = True
        async for delta in self._inner.stream(messages, request_id):
            if first:
                self.first_deltas.append(delta)
                first = False
            yield delta

    async def prefill(self, messages: Sequence[ChatMessage], request_id: str) -> PrefillResult:
        return await self._inner.prefill(messages, request_id)

    async def abort(self, request_id: str) -> None:
        await self._inner.abort(request_id)

    def unfinished_requests(self) -> int:
        return self._inner.unfinished_requests()

    def health(self) -> LLMHealth:
        return self._inner.health()

    async def aclose(self) -> None:
        pass  # the session's engine stays open for the other tests


class CountedASR:
    def __init__(self, inner: ASREngine, calls: Calls) -> None:
        self._inner, self._calls = inner, calls
        self.sample_rate_hz = inner.sample_rate_hz

    def transcribe(self, audio: NDArray[np.float32], *, more: MoreAudio | None = None) -> Transcription:
        self._calls.log.append("asr")
        return self._inner.transcribe(audio, more=more)

    def transcribe_partial(self, audio: NDArray[np.float32]) -> Transcription | None:
        self._calls.log.append("asr")
        return self._inner.transcribe_partial(audio)

    def close(self) -> None:
        pass


class CountedTTS:
    def __init__(self, inner: TTS, calls: Calls) -> None:
        self._inner, self._calls = inner, calls
        self.sample_rate_hz, self.voice = inner.sample_rate_hz, inner.voice

    def synthesize(self, text: str) -> NDArray[np.int16]:
        self._calls.log.append("tts")
        return self._inner.synthesize(text)

    def close(self) -> None:
        pass


class CountedVADStream:
    def __init__(self, inner: VADStream, calls: Calls) -> None:
        self._inner, self._calls = inner, calls
        self.frame_samples = inner.frame_samples

    def push(self, samples: NDArray[np.float32]) -> list[float]:
        probs = self._inner.push(samples)
        if probs:
            self._calls.log.append("vad")
        return probs

    def reset(self) -> None:
        self._inner.reset()


class CountedVAD:
    def __init__(self, inner: VAD, calls: Calls) -> None:
        self._inner, self._calls = inner, calls
        self.sample_rate_hz, self.frame_samples = inner.sample_rate_hz, inner.frame_samples

    def stream(self) -> VADStream:
        return CountedVADStream(self._inner.stream(), self._calls)

    def close(self) -> None:
        pass


def counted(engines: Engines, calls: Calls, llm: LLM | None = None) -> Engines:
    return Engines(
        vad=CountedVAD(engines.vad, calls),
        asr=CountedASR(engines.asr, calls),
        llm=CountedLLM(llm or engines.llm, calls),
        tts=CountedTTS(engines.tts, calls),
        tuning=engines.tuning,
    )


async def test_warm_up_serves_a_request_through_every_engine(engines: Engines, config: Config) -> None:
    calls = Calls()
    wrapped = counted(engines, calls)
    await wrapped.warm_up(config.dialogue.system_prompt)
    assert {"llm", "asr", "tts", "vad"} <= set(calls.log), calls.log
    llm = wrapped.llm
    assert isinstance(llm, CountedLLM) and llm.first_deltas
    assert llm.unfinished_requests() == 0  # the warm-up request ran to its end
    # it measured the LLM's pace, which chooses every reply's first chunk (unless configured)
    measured = wrapped.llm_ms_per_token
    assert measured is not None and measured > 0
    first = chunking(wrapped, config.tts).first_chunk_words
    assert first == choose_first_chunk_words(None, measured) and first in (2, 3)
    # it timed the real Whisper on a real question, which decides whether partials run here
    decode = wrapped.asr_decode_ms
    assert decode is not None and decode > 0
    listens = turn_settings(config, wrapped).asr.partial_interval_ms
    slow = decode > config.asr.partials_max_decode_ms
    assert listens == (0 if slow else config.asr.partial_interval_ms), (decode, listens)
    print(f"ASR at warm-up: {decode:.0f} ms for a question; partials {'off' if slow else 'on'}")
    # and the next turn-shaped request finds the system prompt's whole block in the cache
    question = ChatMessage("user", "Which day comes after Monday?")
    stream = llm.stream([ChatMessage("system", config.dialogue.system_prompt), question], "after-warm-up")
    async for _ in stream:
        break
    await stream.aclose()
    assert (llm.first_deltas[-1].cached_tokens or 0) >= 32


def test_run_warms_every_engine_before_the_session(
    engines: Engines, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import voice_pipeline.runner as runner
    from voice_pipeline.cli import main

    calls = Calls()
    # the command runs its own event loop, and the in-process vLLM engine serves only the loop
    # it first ran in (the test session's): the LLM here is the fake one; the test above warms
    # the real one
    wrapped = counted(engines, calls, llm=FakeLLM("Two plus two is four."))
    monkeypatch.setattr(Engines, "load", classmethod(lambda cls, cfg, paths, progress: wrapped))
    before_session: list[list[str]] = []
    real_run_audio = runner.run_audio

    async def run_audio(*args: Any, **kwargs: Any) -> Any:
        before_session.append(list(calls.log))
        return await real_run_audio(*args, **kwargs)

    monkeypatch.setattr(runner, "run_audio", run_audio)
    wav = tmp_path / "q.wav"
    sf.write(wav, np.concatenate([np.zeros(4000, np.float32), espeak("What is two plus two?")]), 16000)
    rc = main(["run", "--fast", "--input", str(wav), "--output", str(tmp_path / "out.wav")])
    err = capsys.readouterr().err
    assert rc == 0, err
    (seen,) = before_session
    assert {"llm", "asr", "tts", "vad"} <= set(seen), seen  # all warm before the first session
    assert "warming up the engines" in err and "warmed up in" in err
