"""UtteranceTranscriber with a fake engine; pure decisions tested without a loop."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import numpy as np
import pytest
from numpy.typing import NDArray

from asr.base import DecodeUnwanted, MoreAudio, Transcription
from asr.load import EngineLoad
from asr.streaming import (
    FinalTranscript,
    PartialTranscript,
    Speculation,
    UtteranceTranscriber,
    partial_due,
    speculation_usable,
)
from voice_pipeline.config import ASRConfig
from voice_pipeline.errors import AudioInputError, EngineError

RATE = 1000  # fake engine rate: 1 sample = 1 ms


class FakeEngine:
    """Transcribes by script: the words for an audio length. Optionally gated."""

    sample_rate_hz = RATE

    def __init__(self, script: Callable[[int], str], gated: bool = False) -> None:
        self.script = script
        self.calls: list[int] = []
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)
        if not gated:
            self.gate.set()

    def transcribe(self, audio: NDArray[np.float32], *, more: MoreAudio | None = None) -> Transcription:
        self.calls.append(audio.size)
        self.entered.release()
        self.gate.wait(timeout=30)
        text = self.script(audio.size)
        return Transcription(text, tuple(text.split()), audio.size / RATE, 1.0)

    def transcribe_partial(self, audio: NDArray[np.float32]) -> Transcription | None:
        return self.transcribe(audio)

    def close(self) -> None:
        pass


SENTENCE = "what is the capital of france".split()


def growing(samples: int) -> str:
    """One word per 500 ms of audio."""
    return " ".join(SENTENCE[: samples // 500])


def ms(n: int) -> NDArray[np.float32]:
    return np.ones(n, dtype=np.float32)


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=2)
    yield pool
    pool.shutdown(wait=True)


def make(engine: FakeEngine, executor: ThreadPoolExecutor, **cfg: Any) -> UtteranceTranscriber:
    asr_cfg = ASRConfig(**{"partial_interval_ms": 500, **cfg})
    return UtteranceTranscriber(engine, asr_cfg, executor=executor)


async def wait_entered(engine: FakeEngine) -> None:
    """Until the gated engine has been entered once more (the decode is in its thread)."""
    assert await asyncio.to_thread(engine.entered.acquire, True, 10.0)


# ---------------------------------------------------------------- pure decisions


@pytest.mark.parametrize(
    ("buffered", "last", "interval", "decoding", "paused", "due"),
    [
        (500, 0, 500, False, False, True),
        (499, 0, 500, False, False, False),
        (1000, 500, 500, False, False, True),
        (1000, 1000, 500, False, False, False),  # nothing new
        (5000, 0, 500, True, False, False),  # a decode is running
        (5000, 0, 500, False, True, False),  # pause: the speculative final stands
        (5000, 0, 0, False, False, False),  # partials disabled
    ],
)
def test_partial_due(
    buffered: int, last: int, interval: int, decoding: bool, paused: bool, due: bool
) -> None:
    assert partial_due(buffered, last, interval, decoding=decoding, paused=paused) is due


def test_no_partial_is_due_while_another_session_decodes_on_the_engine() -> None:
    assert partial_due(1000, 0, 500, decoding=False, paused=False, engine_busy=False)
    assert not partial_due(1000, 0, 500, decoding=False, paused=False, engine_busy=True)


def test_engine_load_counts_decodes_until_their_threads_return() -> None:
    load = EngineLoad()
    assert not load.busy
    load.begin()
    load.begin()
    load.end()
    assert load.busy
    load.end()
    assert not load.busy
    load.end()  # never below zero
    load.begin()
    assert load.busy


def _spec(utterance: int, valid: bool) -> Speculation:
    return Speculation(task=cast(Any, None), utterance=utterance, valid=valid)


@pytest.mark.parametrize(
    ("spec", "utterance", "usable"),
    [
        (None, 1, False),
        (_spec(1, True), 1, True),
        (_spec(1, False), 1, False),  # speech resumed
        (_spec(1, True), 2, False),  # an earlier utterance's
    ],
)
def test_speculation_usable(spec: Speculation | None, utterance: int, usable: bool) -> None:
    assert speculation_usable(spec, utterance) is usable


# ---------------------------------------------------------------- partials


async def test_partials_commit_and_return_none_when_unchanged(
    executor: ThreadPoolExecutor,
) -> None:
    engine = FakeEngine(growing)
    tr = make(engine, executor)
    tr.start(ms(300))
    assert await tr.partial() is None  # under one interval of audio: no decode
    assert engine.calls == []
    tr.append(ms(700))
    p1 = await tr.partial()
    assert p1 == PartialTranscript(committed="", tentative="what is", text="what is", audio_s=1.0)
    assert await tr.partial() is None  # nothing new since the last partial
    assert engine.calls == [1000]
    tr.append(ms(500))
    p2 = await tr.partial()
    assert p2 is not None
    assert (p2.committed, p2.tentative, p2.audio_s) == ("what is", "the", 1.5)
    await tr.aclose()


async def test_partial_returns_none_when_the_decode_changed_nothing(
    executor: ThreadPoolExecutor,
) -> None:
    tr = make(FakeEngine(lambda n: "hello"), executor)
    tr.start(ms(500))
    first = await tr.partial()
    assert first is not None and first.tentative == "hello"
    tr.append(ms(500))
    second = await tr.partial()
    assert second is not None and second.committed == "hello"
    tr.append(ms(500))
    assert await tr.partial() is None  # same committed, same tentative
    await tr.aclose()


class SkippingEngine(FakeEngine):
    """Its partials are skipped (as the real engine skips one its fast path rejects)
    while ``skip`` is set; finals always decode."""

    skip = True

    def transcribe_partial(self, audio: NDArray[np.float32]) -> Transcription | None:
        result = self.transcribe(audio)
        return None if self.skip else result


async def test_a_partial_the_engine_skips_is_no_partial_and_changes_nothing(
    executor: ThreadPoolExecutor,
) -> None:
    engine = SkippingEngine(growing)
    load = EngineLoad()
    tr = UtteranceTranscriber(engine, ASRConfig(partial_interval_ms=500), executor=executor, load=load)
    tr.start(ms(1000))
    assert await tr.partial() is None
    assert engine.calls == [1000] and not load.busy  # decoded, counted and done
    assert not tr.partial_due  # the skipped one counts as this interval's partial
    tr.append(ms(500))
    engine.skip = False
    p = await tr.partial()
    assert p is not None and (p.committed, p.tentative) == ("", "what is the")  # nothing committed
    tr.speculate()
    final = await tr.final()
    assert final.text == "what is the" and final.speculative
    await tr.aclose()


async def test_partial_is_not_due_while_a_decode_runs(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing, gated=True)
    tr = make(engine, executor)
    tr.start(ms(1000))
    running = asyncio.create_task(tr.partial())
    await wait_entered(engine)
    tr.append(ms(1000))
    assert not tr.partial_due
    assert await tr.partial() is None
    engine.gate.set()
    assert await running is not None
    assert tr.partial_due
    await tr.aclose()


async def test_a_partial_waits_for_another_sessions_final_on_a_shared_engine(
    executor: ThreadPoolExecutor,
) -> None:
    engine = FakeEngine(growing, gated=True)
    load = EngineLoad()
    cfg = ASRConfig(partial_interval_ms=500)
    speaking = UtteranceTranscriber(engine, cfg, executor=executor, load=load)
    pausing = UtteranceTranscriber(engine, cfg, executor=executor, load=load)
    pausing.start(ms(1000))
    pausing.speculate()  # its final decode is on the engine
    await wait_entered(engine)
    speaking.start(ms(1000))
    assert not speaking.partial_due  # it would queue ahead of the other session's final
    assert await speaking.partial() is None
    engine.gate.set()
    assert (await pausing.final()).text == "what is"
    assert speaking.partial_due  # the engine is idle again
    assert await speaking.partial() is not None
    # the gate off: the partial queues behind the other session's decode, as before
    off = ASRConfig(partial_interval_ms=500, partials_on_idle_engine=False)
    alone = UtteranceTranscriber(engine, off, executor=executor, load=load)
    load.begin()
    alone.start(ms(1000))
    assert alone.partial_due
    load.end()
    for tr in (speaking, pausing, alone):
        await tr.aclose()
    assert not load.busy


async def test_partial_of_a_replaced_utterance_is_dropped(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing, gated=True)
    tr = make(engine, executor)
    tr.start(ms(1000))
    running = asyncio.create_task(tr.partial())
    await wait_entered(engine)
    tr.start(ms(100))
    engine.gate.set()
    assert await running is None
    await tr.aclose()


async def test_no_partial_during_a_pause(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    await asyncio.wait(cast(Any, tr)._tasks)  # the speculative decode is done
    tr.append(np.zeros(1000, dtype=np.float32))
    assert not tr.partial_due  # paused: the speculation stands
    tr.invalidate()  # speech resumed
    assert tr.partial_due
    assert await tr.partial() is not None
    await tr.aclose()


async def test_no_partial_while_a_discarded_decode_runs(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing, gated=True)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    await wait_entered(engine)
    tr.invalidate()
    tr.append(ms(1000))
    assert await tr.partial() is None  # its thread still holds the CPU
    engine.gate.set()
    await asyncio.wait(cast(Any, tr)._tasks)
    assert await tr.partial() is not None
    await tr.aclose()


async def test_partials_disabled(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing)
    tr = make(engine, executor, partial_interval_ms=0)
    tr.start(ms(5000))
    assert await tr.partial() is None
    assert engine.calls == []
    await tr.aclose()


# ---------------------------------------------------------------- finals


async def test_speculation_is_reused_when_speech_did_not_resume(
    executor: ThreadPoolExecutor,
) -> None:
    engine = FakeEngine(growing)
    tr = make(engine, executor)
    tr.start(ms(3000))
    tr.speculate()
    tr.append(np.zeros(300, dtype=np.float32))  # the pause
    tr.speculate()  # a second call while valid: no new decode
    final = await tr.final()
    assert final.speculative
    assert final.text == "what is the capital of france"
    assert final.audio_s == 3.0
    assert engine.calls == [3000]
    await tr.aclose()


async def test_speculation_is_redone_after_invalidate(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    tr.invalidate()  # speech resumed
    tr.append(ms(1000))
    final = await tr.final()
    assert not final.speculative
    assert final.words == ("what", "is", "the", "capital")
    assert final.audio_s == 2.0
    assert 2000 in engine.calls  # (the discarded 1000-sample decode may run before or after)
    await tr.aclose()


async def test_new_speculation_after_invalidate_is_used(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    tr.invalidate()
    tr.append(ms(500))
    tr.speculate()  # the next pause
    final = await tr.final()
    assert final.speculative and final.audio_s == 1.5
    assert 1500 in engine.calls
    await tr.aclose()


async def test_speculation_disabled_decodes_at_final(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing)
    tr = make(engine, executor, speculative_final=False)
    tr.start(ms(1000))
    tr.speculate()
    assert engine.calls == []
    final = await tr.final()
    assert not final.speculative and final.text == "what is"
    await tr.aclose()


async def test_start_discards_the_previous_speculation(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    tr.start(ms(500))
    final = await tr.final()
    assert not final.speculative and final.text == "what"
    await tr.aclose()


async def test_final_waits_for_a_running_speculation(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing, gated=True)
    ticks = iter([0, 7_000_000])
    tr = UtteranceTranscriber(engine, ASRConfig(), executor=executor, clock=lambda: next(ticks))
    tr.start(ms(1000))
    tr.speculate()
    await wait_entered(engine)
    final_task = asyncio.create_task(tr.final())
    await asyncio.sleep(0)
    assert not final_task.done()
    engine.gate.set()
    final = await final_task
    assert 0 < final.decode_start_ns <= final.decode_end_ns  # stamped in the decoding thread
    assert dataclasses.replace(final, decode_start_ns=0, decode_end_ns=0) == FinalTranscript(
        text="what is",
        words=("what", "is"),
        audio_s=1.0,
        decode_ms=1.0,
        speculative=True,
        waited_ms=7.0,
    )
    await tr.aclose()


class AskingEngine(FakeEngine):
    """Asks for the audio that came since, after its (gated) decode, as the real engine does
    when its short window rejects the pause's cut; records the answer: "not offered" when
    the transcriber gave no ``more``, "unwanted" when it raised DecodeUnwanted (and raises it
    on, as the real engine does), else its length in samples or None."""

    def __init__(self, script: Callable[[int], str]) -> None:
        super().__init__(script, gated=True)
        self.answers: list[int | str | None] = []
        self.answered = threading.Semaphore(0)

    def transcribe(self, audio: NDArray[np.float32], *, more: MoreAudio | None = None) -> Transcription:
        result = super().transcribe(audio)
        try:
            later = None if more is None else more()
        except DecodeUnwanted:
            self.answers.append("unwanted")
            raise
        else:
            self.answers.append("not offered" if more is None else None if later is None else later.size)
        finally:
            self.answered.release()
        return result


async def test_the_pause_decode_may_ask_for_the_pause_that_came_since(executor: ThreadPoolExecutor) -> None:
    engine = AskingEngine(growing)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    await wait_entered(engine)
    tr.append(np.zeros(200, dtype=np.float32))  # the pause goes on while the engine decodes
    engine.gate.set()
    final = await tr.final()
    assert final.speculative and engine.calls == [1000]
    assert engine.answers == [1200]  # the utterance so far, pause included
    tr.start(ms(500))
    tr.append(ms(500))
    await tr.final()  # no speculation: the whole utterance is there, nothing is offered
    assert engine.answers == [1200, "not offered"]
    await tr.aclose()


async def test_the_pause_decode_gets_nothing_once_another_utterance_began(
    executor: ThreadPoolExecutor,
) -> None:
    engine = AskingEngine(growing)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    await wait_entered(engine)
    tr.start(ms(500))  # the speaker went on as a new utterance: the old decode is void
    engine.gate.set()
    final = await tr.final()
    assert not final.speculative and final.text == "what"
    for _ in range(2):  # the void decode's thread runs to its end too
        assert await asyncio.to_thread(engine.answered.acquire, True, 10.0)
    # never the new utterance's audio: the void decode is told to stop
    assert sorted(engine.answers, key=str) == ["not offered", "unwanted"]
    await tr.aclose()


async def test_a_pause_decode_is_told_to_stop_once_the_speaker_went_on(
    executor: ThreadPoolExecutor,
) -> None:
    """Speech resumed after a mid-sentence pause: the engine learns that its decode is void
    before its costlier path (the real one's full 30 s window, ~1 s on an AVX2 CPU), and the
    next pause's decode does not queue behind it."""
    engine = AskingEngine(growing)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    await wait_entered(engine)
    tr.invalidate()  # the speaker went on
    tr.append(ms(1000))
    assert await tr.speculative() is None
    engine.gate.set()
    assert await asyncio.to_thread(engine.answered.acquire, True, 10.0)
    assert engine.answers == ["unwanted"]
    tr.speculate()  # the next pause
    assert await asyncio.to_thread(engine.entered.acquire, True, 10.0)
    final = await tr.final()
    assert final.speculative and final.text == "what is the capital" and engine.answers[-1] == 2000
    await tr.aclose()


async def test_a_pause_decode_the_turn_awaits_is_never_told_to_stop(executor: ThreadPoolExecutor) -> None:
    """The turn ended on this decode (final() awaits it) and the speaker began anew before it
    finished: it still decodes to its end, and the turn gets its words."""
    engine = AskingEngine(growing)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    await wait_entered(engine)
    final_task = asyncio.create_task(tr.final())
    await asyncio.sleep(0)
    tr.start(ms(500))  # the next utterance begins while the turn's decode runs
    engine.gate.set()
    final = await final_task
    assert final.speculative and final.text == "what is"
    assert engine.answers == [None]  # nothing more to add, and not told to stop
    await tr.aclose()


# ---------------------------------------------------------------- lifetime


async def test_aclose_cancels_the_speculation_and_is_idempotent(
    executor: ThreadPoolExecutor,
) -> None:
    engine = FakeEngine(growing, gated=True)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    await wait_entered(engine)
    spec = cast(Any, tr)._speculation
    assert isinstance(spec, Speculation)
    await tr.aclose()
    assert spec.task.cancelled()
    await tr.aclose()
    assert tr.closed
    with pytest.raises(EngineError):
        tr.append(ms(10))
    with pytest.raises(EngineError):
        await tr.final()
    engine.gate.set()  # let the worker thread finish


async def test_aclose_cancels_an_invalidated_decode(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing, gated=True)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    await wait_entered(engine)
    tr.invalidate()
    tasks = list(cast(Any, tr)._tasks)
    assert len(tasks) == 1
    await tr.aclose()
    assert tasks[0].cancelled()
    engine.gate.set()


async def test_cancelling_final_raises_and_keeps_the_speculation(
    executor: ThreadPoolExecutor,
) -> None:
    engine = FakeEngine(growing, gated=True)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    await wait_entered(engine)
    final_task = asyncio.create_task(tr.final())
    await asyncio.sleep(0)
    final_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await final_task
    engine.gate.set()
    final = await tr.final()
    assert final.speculative and final.text == "what is"
    assert engine.calls == [1000]
    await tr.aclose()


async def test_aclose_during_final_raises_engine_error(executor: ThreadPoolExecutor) -> None:
    engine = FakeEngine(growing, gated=True)
    tr = make(engine, executor)
    tr.start(ms(1000))
    tr.speculate()
    await wait_entered(engine)
    final_task = asyncio.create_task(tr.final())
    await asyncio.sleep(0)
    await tr.aclose()  # cancels the speculation final() is waiting for
    with pytest.raises(EngineError, match="closed during final"):
        await final_task
    engine.gate.set()


async def test_engine_errors_reach_final(executor: ThreadPoolExecutor) -> None:
    def broken(samples: int) -> str:
        raise EngineError("decode failed")

    tr = make(FakeEngine(broken), executor)
    tr.start(ms(1000))
    tr.speculate()
    with pytest.raises(EngineError, match="decode failed"):
        await tr.final()
    await tr.aclose()


def test_rejects_non_mono_audio() -> None:
    tr = UtteranceTranscriber(FakeEngine(growing), ASRConfig())
    with pytest.raises(AudioInputError):
        tr.start(np.zeros((2, 100), dtype=np.float32))
