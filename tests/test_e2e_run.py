"""End to end with the real models: a spoken two-question file through the whole pipeline.

Questions are spoken by espeak-ng (not the assistant's Piper voice), streamed in
real time like a live microphone; the replies are transcribed back by Whisper.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import numpy as np
import pytest
from speech import concat, espeak, normalize, silence, word_error_rate

from voice_pipeline.audio import resample, to_float32
from voice_pipeline.engines import Engines
from voice_pipeline.ledger.ledger import COMPUTE_SPANS, CRITICAL_PATH
from voice_pipeline.ledger.records import Span
from voice_pipeline.runner import RunResult, run_audio

if TYPE_CHECKING:
    from asr.base import ASREngine
    from voice_pipeline.config import Config

pytestmark = pytest.mark.real_models

QUESTIONS = ("What is the capital of France?", "Name one planet in our solar system.")


@pytest.fixture(scope="module")
def two_questions() -> tuple[np.ndarray, list[float]]:
    """Audio and the acoustic end time (s) of each question's speech."""
    parts, ends, t = [silence(0.5)], [], 0.5
    for q in QUESTIONS:
        speech = espeak(q)
        last_sound = int(np.flatnonzero(np.abs(speech) > 0.003)[-1]) + 1  # -50 dBFS
        parts += [speech, silence(7.0)]
        ends.append(t + last_sound / 16000)
        t += len(speech) / 16000 + 7.0
    return concat(*parts), ends


@pytest.fixture(scope="module")
async def result(
    engines: Engines, config: Config, two_questions: tuple[np.ndarray, list[float]]
) -> RunResult:
    audio, _ = two_questions
    return await asyncio.wait_for(run_audio(engines, config, audio, 16000, realtime=True), timeout=120)


def test_each_question_is_transcribed(result: RunResult) -> None:
    assert len(result.turns) == 2
    for turn, question in zip(result.turns, QUESTIONS, strict=True):
        assert word_error_rate(question, str(turn["user_text"])) <= 0.15, turn["user_text"]


def test_each_reply_is_spoken_and_intelligible(result: RunResult, whisper: ASREngine) -> None:
    for rec in result.records:
        assert rec.assistant_text, "empty reply"
        assert not rec.interrupted
        assert rec.work.audio_synthesized_s > 0.3
    # transcribe what the listener heard in each reply window
    out = to_float32(result.output)
    for rec in result.records:
        start = result.turns[rec.turn_id - 1]["marks"]["first_audio_sent"]  # type: ignore[index]
        a = int(float(start) / 1000 * result.output_rate_hz)
        b = a + int(rec.work.audio_heard_s * result.output_rate_hz) + result.output_rate_hz // 2
        heard = whisper.transcribe(resample(out[a:b], result.output_rate_hz, 16000)).text
        assert len(normalize(heard).split()) >= 2, heard


def test_capital_of_france_mentions_paris(result: RunResult) -> None:
    assert "paris" in normalize(result.records[0].assistant_text)


def test_every_stage_recorded_and_adds_up(result: RunResult) -> None:
    for rec in result.records:
        for stage in CRITICAL_PATH:
            assert stage.name in rec.stages_ms, (stage.name, rec.stages_ms)
            assert rec.stages_ms[stage.name] >= 0
        total = sum(rec.stages_ms[s.name] for s in CRITICAL_PATH)
        assert abs(total - rec.stages_ms["voice_to_voice"]) < 1.0


def test_output_timeline_agrees_with_ledger(
    result: RunResult, two_questions: tuple[np.ndarray, list[float]]
) -> None:
    """Voice-to-voice measured on the audio itself -- from the question's acoustic end in IN
    to the first audible reply sample in OUT -- agrees with the ledger's figure."""
    _, ends = two_questions
    out = np.abs(result.output.astype(np.int32))
    rate = result.output_rate_hz
    for rec, speech_end_s in zip(result.records, ends, strict=True):
        a = int(speech_end_s * rate)
        audible = np.flatnonzero(out[a:] > 100)  # about -50 dBFS
        assert audible.size, "no reply audio after the question"
        v2v_out_ms = audible[0] / rate * 1000
        assert abs(v2v_out_ms - rec.stages_ms["voice_to_voice"]) < 100, (v2v_out_ms, rec.stages_ms)


def test_critical_path_compute_spans_and_overhead(result: RunResult) -> None:
    """Each reply's voice_to_voice window holds the four compute spans; the overhead is the
    part no span covers, so it is at least the window minus their sum and never negative."""
    plain = set(COMPUTE_SPANS) - {Span.TOOL, Span.LLM_ANSWER}  # no tools in this run
    for rec in result.records:
        assert set(rec.compute_ms) == plain, rec.compute_ms
        assert all(rec.compute_ms[name] > 0 for name in plain), rec.compute_ms
        v2v = rec.stages_ms["voice_to_voice"]
        assert rec.overhead_ms is not None and 0 <= rec.overhead_ms <= v2v
        assert rec.overhead_ms >= v2v - sum(rec.compute_ms.values()) - 0.01
