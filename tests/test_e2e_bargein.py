"""Barge-in end to end with the real models, file-driven through the same runner as
``voice-pipeline run``: interruptions, echo, backchannels, and many interruptions
in a row.

Questions are spoken by espeak-ng at test time; OUT's timeline is what a listener
heard, so "the reply stopped" is measured on the audio itself.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import typing
from typing import TYPE_CHECKING

import numpy as np
import pytest
from polling import until
from speech import acoustic_span, concat, espeak, normalize, silence, word_error_rate

from llm.base import ChatMessage
from voice_pipeline import events as ev
from voice_pipeline.clock import now_ns
from voice_pipeline.conversation.session import Session
from voice_pipeline.runner import EchoPath, RunResult, run_audio

if TYPE_CHECKING:
    from voice_pipeline.config import Config
    from voice_pipeline.engines import Engines

pytestmark = pytest.mark.real_models

RATE = 16000
STORY = "Tell me a long story about a brave knight and a dragon."
QUESTION = "What is the capital of France?"


def silent_run_start(out: np.ndarray, start: int, min_len: int) -> int:
    """First position >= start where ``min_len`` consecutive zero samples begin."""
    zero = out[start:] == 0
    run = 0
    for i, z in enumerate(zero):
        run = run + 1 if z else 0
        if run >= min_len:
            return start + i - min_len + 1
    return len(out)


class Events:
    def __init__(self) -> None:
        self.items: list[ev.Event] = []

    def __call__(self, e: ev.Event) -> None:
        self.items.append(e)

    def of(self, kind: type) -> list[ev.Event]:
        return [e for e in self.items if isinstance(e, kind)]

    def sent_s(self, turn_id: int, rate_hz: int) -> float:
        """Seconds of reply audio that went to the listener (every ClauseSynthesized). The
        record's ``audio_synthesized_s`` may hold more: a first chunk synthesized on the
        chunker's guess that the next tokens proved wrong is wasted, never sent (seen on a
        2-core AVX2 EPYC, where tokens come slower than the guess)."""
        clauses = [e for e in self.of(ev.ClauseSynthesized) if e.turn_id == turn_id]
        return sum(typing.cast(ev.ClauseSynthesized, e).samples for e in clauses) / rate_hz


# ------------------------------------------------------------ interruption


@pytest.fixture(scope="module")
def interruption_input() -> tuple[np.ndarray, float]:
    """A story request, then 3.5 s later a new question; returns audio and the
    question's acoustic onset (s)."""
    story, question = espeak(STORY), espeak(QUESTION)
    lead = silence(0.5)
    _, story_end = acoustic_span(story)
    gap = silence(3.5 - (len(story) - story_end) / RATE)
    onset = (len(lead) + len(story) + len(gap) + acoustic_span(question)[0]) / RATE
    return concat(lead, story, gap, question, silence(8.0)), onset


@pytest.fixture(scope="module")
async def interrupted(
    engines: Engines, config: Config, interruption_input: tuple[np.ndarray, float]
) -> tuple[RunResult, Events]:
    events = Events()
    audio, _ = interruption_input
    result = await asyncio.wait_for(run_audio(engines, config, audio, RATE, on_event=events), timeout=120)
    return result, events


def test_reply_audio_stops_at_the_flush_after_the_onset(
    interrupted: tuple[RunResult, Events], interruption_input: tuple[np.ndarray, float], config: Config
) -> None:
    """In order, on OUT's timeline (what the listener heard) and the ledger's: the reply was
    playing, the question began, the barge-in was detected on it, the flush was sent, and
    from the flush nothing more of the reply was heard until the new answer. How long the
    stop took is printed (the budget is the benchmarks' to measure: bench, docs/bench.md)."""
    result, _ = interrupted
    _, onset_s = interruption_input
    rate = result.output_rate_hz
    first, second = (typing.cast(dict[str, dict[str, float]], t) for t in result.turns[:2])
    # marks in ms on the input's timeline, which OUT shares
    flush_s, detected_s = first["marks"]["flush_sent"] / 1000, first["marks"]["barge_in_onset"] / 1000
    answer_s = second["marks"]["first_audio_sent"] / 1000
    assert np.any(result.output[: int(onset_s * rate)] != 0), "the reply was not playing before the onset"
    assert detected_s <= flush_s < answer_s, (detected_s, flush_s, answer_s)
    # the barge-in was detected on the question, not before it (the VAD's pre-roll and
    # frame: a little before its first loud sample at most)
    assert onset_s - (config.vad.pre_roll_ms + 100) / 1000 <= detected_s, (onset_s, detected_s)
    # (the marks are rounded to 0.1 ms on a timeline the output places audio on to the sample)
    after_flush = result.output[int(np.ceil((flush_s + 0.005) * rate)) : int((answer_s - 0.005) * rate)]
    assert len(after_flush) and not np.any(after_flush), "reply audio was heard after the flush"
    stop = silent_run_start(result.output, int(onset_s * rate), rate // 5)
    print(
        f"barge-in: onset {onset_s:.3f} s, detected {detected_s:.3f} s, flush {flush_s:.3f} s; "
        f"audio stopped {(stop / rate - onset_s) * 1000:.0f} ms after the onset "
        f"(ledger barge_in_stop {first['stages_ms']['barge_in_stop']:.0f} ms, "
        f"budget {config.budget.barge_in_stop_ms:.0f} ms)"
    )
    assert stop / rate <= flush_s + 0.05  # silent from the flush on (output rounding)


def test_history_keeps_only_what_was_heard(interrupted: tuple[RunResult, Events]) -> None:
    result, _ = interrupted
    first = result.records[0]
    assert first.interrupted
    heard, said = normalize(first.heard_text).split(), normalize(first.assistant_text).split()
    assert heard, "nothing heard: the reply was interrupted before it was audible"
    assert len(heard) < len(said) and said[: len(heard)] == heard  # a proper prefix
    assert result.history[1] == ChatMessage("assistant", first.heard_text + "...")
    # the unheard rest of the reply was generated for nothing; its audio may or may not have
    # been: on a machine whose LLM is barely ahead of playback (92 ms a token, a 2-core
    # AVX2 EPYC in CI) the interruption can fall in a gap, when all that was synthesized
    # had been heard
    work = first.work
    assert work.wasted_tokens > 0, work
    assert 0 < work.audio_heard_s <= work.audio_synthesized_s + 1e-6, work
    print(f"interrupted: {work.wasted_tokens} tokens and {work.wasted_audio_s:.3f} s of audio wasted")
    assert "barge_in_stop" in first.stages_ms
    assert {"llm_aborted", "tts_stopped", "flush_sent", "barge_in_confirmed"} <= set(first.marks_ns)


def test_the_new_question_is_transcribed_in_full_and_answered(interrupted: tuple[RunResult, Events]) -> None:
    result, events = interrupted
    assert len(result.records) == 2
    second = result.records[1]
    assert word_error_rate(QUESTION, second.user_text) <= 0.15, second.user_text
    assert second.interruption == "words"
    assert second.assistant_text and not second.interrupted
    assert len(events.of(ev.ReplyInterrupted)) == 1


def test_nothing_from_the_interrupted_turn_is_sent_after_the_flush(
    interrupted: tuple[RunResult, Events],
) -> None:
    result, events = interrupted
    first = result.records[0]
    flush = first.marks_ns["flush_sent"]
    late = [
        e
        for e in events.of(ev.AssistantTextStreamed)
        if e.turn_id == 1 and e.t_ns > first.marks_ns["llm_aborted"]
    ]
    assert not late
    assert first.marks_ns["llm_aborted"] >= flush


async def test_no_unfinished_llm_request_after_the_run(
    interrupted: tuple[RunResult, Events], engines: Engines
) -> None:
    await asyncio.sleep(0.05)
    assert engines.llm.unfinished_requests() == 0


# ------------------------------------------------------------ echo


@pytest.mark.parametrize("delay_ms", [60.0, 180.0])
async def test_own_voice_echo_does_not_interrupt(engines: Engines, config: Config, delay_ms: float) -> None:
    events = Events()
    audio = concat(silence(0.5), espeak("Tell me a fun fact about the ocean."), silence(6.0))
    result = await asyncio.wait_for(
        run_audio(engines, config, audio, RATE, on_event=events, echo=EchoPath(-6.0, delay_ms)), timeout=120
    )
    replies = [r for r in result.records if r.assistant_text]
    assert len(replies) == 1, result.records  # the assistant never answered its own echo
    reply = replies[0]
    assert reply.work.audio_synthesized_s > 1.0, "reply too short to test echo"
    assert not reply.interrupted
    assert not events.of(ev.ReplyPaused)  # not even a pause: the reply played without a gap
    sent_s = events.sent_s(reply.turn_id, result.output_rate_hz)
    assert sent_s <= reply.work.audio_synthesized_s + 0.001
    assert reply.work.audio_heard_s == pytest.approx(sent_s, abs=0.05)
    # echo the gate missed may start a user turn; its words show it was no interruption
    others = [r for r in result.records if r is not reply]
    assert all(r.interruption in {"echo", "backchannel", "no_words"} for r in others), others


# ------------------------------------------------------------ backchannel


async def test_backchannel_does_not_interrupt(engines: Engines, config: Config) -> None:
    events = Events()
    story = espeak(STORY)
    _, story_end = acoustic_span(story)
    gap = silence(3.0 - (len(story) - story_end) / RATE)
    audio = concat(silence(0.5), story, gap, espeak("uh-huh"), silence(10.0))
    result = await asyncio.wait_for(run_audio(engines, config, audio, RATE, on_event=events), timeout=120)
    reply = result.records[0] if result.records[0].assistant_text else result.records[1]
    assert not reply.interrupted
    assert not events.of(ev.ReplyInterrupted)
    # what the ASR made of "uh-huh" (the words, or nothing at all) is a false interruption
    spoken_over = [r for r in result.records if r.interruption is not None]
    assert all(r.interruption in {"backchannel", "no_words"} and not r.assistant_text for r in spoken_over)
    assert reply.false_interruptions == len(events.of(ev.ReplyResumed))
    # the listener heard the whole reply, exactly once
    sent_s = events.sent_s(reply.turn_id, result.output_rate_hz)
    assert sent_s <= reply.work.audio_synthesized_s + 0.001
    assert reply.work.audio_heard_s == pytest.approx(sent_s, abs=0.05)
    assert all(m.content != "uh-huh" for m in result.history)


# ------------------------------------------------------------ many interruptions


class _NullTransport:
    """Counts what a session sends; the listener plays everything at once."""

    def __init__(self, rate: int) -> None:
        self.output_rate_hz = rate
        self.audio: dict[int, int] = {}
        self.completed: set[int] = set()
        self.ended: set[int] = set()  # the user's turns whose end was detected

    def emit(self, event: ev.Event) -> None:
        if isinstance(event, ev.TurnCompleted):
            self.completed.add(event.turn_id)
        elif isinstance(event, ev.EndpointDetected):
            self.ended.add(event.turn_id)

    async def play(self, turn_id: int, pcm: np.ndarray) -> None:
        self.audio[turn_id] = self.audio.get(turn_id, 0) + len(pcm)

    def clear(self, turn_id: int) -> None:
        pass

    def played_samples(self, turn_id: int) -> int:
        return self.audio.get(turn_id, 0)

    async def drain(self, turn_id: int) -> None:
        await asyncio.sleep(5)  # a long reply: still "playing" when interrupted


async def test_a_hundred_interruptions_in_one_session(engines: Engines, config: Config) -> None:
    question = concat(silence(0.3), espeak("Tell me a story."), silence(0.5))
    transport = _NullTransport(engines.tts.sample_rate_hz)
    session = Session(engines, config, transport)
    rng = np.random.default_rng(7)
    frame = RATE * 20 // 1000
    gc.collect()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for i in range(1, 101):
        for start in range(0, len(question), frame):
            await session.push_audio(question[start : start + frame], now_ns())
        # the audio came faster than real time: the turn ends when its evidence is back
        # (the words are waited for), not with its last frame
        await until(lambda i=i: i in transport.ended, 30.0, what=f"turn {i} ended")
        # interrupt at a random point: while the LLM streams, while TTS runs, or while "playing"
        await asyncio.sleep(float(rng.uniform(0.0, 0.6)))
        session.interrupt()
        await until(lambda i=i: i in transport.completed, 30.0, what=f"turn {i} completed")
    for _ in range(600):  # a prefill of the cut history may still be on its way (dialogue.prefill_ahead)
        if session.unfinished_tasks() == 0:
            break
        await asyncio.sleep(0.05)
    assert session.unfinished_tasks() == 0
    assert engines.llm.unfinished_requests() == 0
    assert len(session.ledger.records) == 100
    await session.aclose()
    gc.collect()
    growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert growth_mb < 150, growth_mb
