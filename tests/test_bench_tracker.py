"""Attributing what arrives on the wire to the caller's turns, and the client-side figures (pure)."""

from __future__ import annotations

import numpy as np
import pytest
from records import turn_record

from voice_pipeline.bench.scenario import Clip, TurnPlan
from voice_pipeline.bench.tracker import (
    AudioCleared,
    ReplyAudio,
    ReplyCut,
    SpeechHeard,
    Tracker,
    TurnContinuedSeen,
    TurnFailedReported,
    TurnRecorded,
    result,
)

CLIP = Clip("q", np.zeros(160, np.float32), 16000, 0, 160)


def plan(index: int, *, cut_after: float | None = None, interrupts: bool = False) -> TurnPlan:
    return TurnPlan(index, CLIP, interrupts, cut_after)


def test_ws_voice_to_voice_counts_from_the_end_of_speech_to_the_first_voiced_frame() -> None:
    tr = Tracker()
    obs = tr.begin(plan(0))
    tr.speech_onset(obs, 10.0)
    tr.feed(SpeechHeard(10.3, 7))
    tr.speech_end(obs, 11.5)
    tr.feed(ReplyAudio(12.0, 7, 1600, 16000, voiced=False))  # leading silence is not the reply yet
    tr.feed(ReplyAudio(12.25, 7, 16000, 16000, voiced=True))
    tr.feed(ReplyAudio(12.26, 99, 16000, 16000, voiced=True))  # another turn id: not ours, no owner
    assert not tr.recorded(obs)
    tr.feed(TurnRecorded(14.0, 7, turn_record(7, interrupted=False, stages_ms={"voice_to_voice": 700.0})))
    assert tr.recorded(obs)
    r = result(obs, 0, origin_t=10.0)
    assert r.voice_to_voice_ms == pytest.approx(750.0)
    assert r.speech_end_s == pytest.approx(1.5) and r.first_voiced_s == pytest.approx(2.25)
    assert r.reply_audio_s == pytest.approx(1.1)
    assert r.server_turn_ids == (7,) and r.server_interrupted is False
    assert r.barge_in_stop_ms is None and r.error is None
    assert r.as_dict()["kind"] == "question"


def test_ws_barge_in_stop_runs_to_the_later_of_the_last_audio_and_the_clear() -> None:
    tr = Tracker()
    first = tr.begin(plan(0, cut_after=1.0))
    tr.speech_onset(first, 0.0)
    tr.feed(SpeechHeard(0.3, 1))
    tr.speech_end(first, 2.0)
    tr.feed(ReplyAudio(2.8, 1, 48000, 16000, voiced=True))  # 3 s of reply at once (faster than real time)
    second = tr.begin(plan(1, interrupts=True))
    tr.speech_onset(second, 3.8, interrupting=True)
    tr.feed(SpeechHeard(4.1, 2))
    tr.feed(AudioCleared(4.05, 1))
    tr.feed(ReplyCut(4.9, 1, "interrupted"))
    tr.feed(TurnRecorded(4.9, 1, turn_record(1, interrupted=True)))
    tr.speech_end(second, 5.5)
    tr.feed(ReplyAudio(6.1, 2, 8000, 16000, voiced=True))
    cut = result(first, 0, 0.0)
    assert cut.barge_in_stop_ms == pytest.approx(250.0)  # all audio came before the onset: the clear ends it
    assert cut.cleared and cut.server_interrupted is True and cut.interrupt_planned
    nxt = result(second, 0, 0.0)
    assert nxt.voice_to_voice_ms == pytest.approx(600.0) and nxt.barge_in_stop_ms is None
    assert nxt.as_dict()["kind"] == "interruption"


def test_twilio_audio_without_turn_ids_goes_to_the_turn_whose_speech_ended_last() -> None:
    tr = Tracker()
    first = tr.begin(plan(0, cut_after=0.5))
    tr.speech_onset(first, 0.0)
    tr.speech_end(first, 1.0)
    tr.feed(ReplyAudio(0.5, None, 160, 8000, voiced=True))  # before any speech ended: nobody's
    for i in range(50):  # paced 20 ms frames
        tr.feed(ReplyAudio(1.8 + i * 0.02, None, 160, 8000, voiced=True))
    second = tr.begin(plan(1, interrupts=True))
    tr.speech_onset(second, 2.5, interrupting=True)
    tr.feed(ReplyAudio(2.78, None, 160, 8000, voiced=True))  # still the first reply, while we speak
    tr.feed(AudioCleared(2.8, None))
    tr.speech_end(second, 4.0)
    assert not tr.quiet(second, 4.1, 1.5)
    tr.feed(ReplyAudio(4.9, None, 160, 8000, voiced=True))
    assert not tr.quiet(second, 5.0, 1.5) and tr.quiet(second, 6.5, 1.5)
    a, b = result(first, 0, 0.0), result(second, 0, 0.0)
    assert a.voice_to_voice_ms == pytest.approx(800.0)
    assert a.barge_in_stop_ms == pytest.approx(300.0)
    assert a.server_interrupted is None  # Twilio: no ledger records
    assert b.voice_to_voice_ms == pytest.approx(900.0)


def test_a_failed_turn_and_a_turn_nobody_heard() -> None:
    tr = Tracker()
    obs = tr.begin(plan(0))
    tr.speech_onset(obs, 0.0)
    tr.feed(SpeechHeard(0.2, 3))
    tr.speech_end(obs, 1.0)
    tr.feed(TurnFailedReported(1.5, 3, "llm", "timed out"))
    assert result(obs, 1, 0.0).error == "llm: timed out"
    silent = tr.begin(plan(1))
    tr.speech_onset(silent, 2.0)
    tr.speech_end(silent, 3.0)
    assert not tr.recorded(silent)  # no speech.started: never counts as answered
    r = result(silent, 1, 0.0)
    assert r.voice_to_voice_ms is None and r.server_turn_ids == ()


def test_remaining_reply_audio_plays_out_in_real_time_from_arrival() -> None:
    tr = Tracker()
    obs = tr.begin(plan(0))
    tr.speech_onset(obs, 0.0)
    tr.feed(SpeechHeard(0.1, 1))
    tr.speech_end(obs, 1.0)
    tr.feed(ReplyAudio(2.0, 1, 32000, 16000, voiced=True))  # 2 s of audio at once
    tr.feed(ReplyAudio(2.5, 1, 16000, 16000, voiced=True))  # queued behind it: plays until 5.0
    assert tr.remaining(obs, 2.5) == pytest.approx(2.5)
    assert tr.remaining(obs, 4.5) == pytest.approx(0.5)
    assert tr.remaining(obs, 6.0) == 0
    tr.feed(AudioCleared(3.0, 1))  # the listener drops what it holds
    assert tr.remaining(obs, 3.0) == 0


PAUSED = Clip("q ... r", np.zeros(16000, np.float32), 16000, 0, 16000, pauses_at=(6000,))


def test_a_paused_sentence_cut_into_two_turns_ended_early() -> None:
    tr = Tracker()
    obs = tr.begin(TurnPlan(0, PAUSED, False, None))
    tr.speech_onset(obs, 1.0)
    tr.feed(SpeechHeard(1.2, 1))
    tr.feed(ReplyAudio(2.3, 1, 8000, 16000, voiced=True))  # the first fragment's reply, mid-sentence
    tr.feed(SpeechHeard(2.6, 2))  # the speaker went on: the server made a second turn of it
    tr.speech_end(obs, 3.0)
    tr.feed(ReplyAudio(3.8, 2, 16000, 16000, voiced=True))
    r = result(obs, 0, origin_t=0.0)
    assert r.paused and r.premature_end is True and r.continued == 0
    assert r.talked_over_s == pytest.approx(0.5)  # heard while still speaking
    assert r.voice_to_voice_ms == pytest.approx(800.0)
    d = r.as_dict()
    assert (d["paused"], d["premature_end"], d["talked_over_s"]) == (True, True, 0.5)


def test_talk_over_is_what_was_heard_not_what_arrived() -> None:
    """A reply sent ahead in one burst mid-sentence and cleared when the speaker went on was heard
    only until the clear (a 4-session bench counted 2.2 s of arrived audio as talked over)."""
    tr = Tracker()
    obs = tr.begin(TurnPlan(0, PAUSED, False, None))
    tr.speech_onset(obs, 1.0)
    tr.feed(SpeechHeard(1.2, 1))
    tr.feed(ReplyAudio(2.0, 1, 16000, 16000, voiced=True))  # 1 s at once, in the pause
    tr.feed(ReplyAudio(2.1, 1, 19200, 16000, voiced=True))  # 1.2 s more, queued behind: 3.0-4.2
    tr.feed(AudioCleared(2.4, 1))  # the speaker went on: the listener drops the rest
    tr.feed(TurnContinuedSeen(2.4, 1))
    tr.speech_end(obs, 5.0)
    tr.feed(ReplyAudio(6.0, 1, 16000, 16000, voiced=True))  # the reply to the whole sentence
    r = result(obs, 0, origin_t=0.0)
    assert r.reply_audio_s == pytest.approx(3.2)  # all that arrived
    assert r.talked_over_s == pytest.approx(0.4)  # 2.0-2.4, then cleared; 6.0 is after the end
    # not cleared: it plays on, queued, past the end of the sentence (4.2 s) only until 5.0
    tr2 = Tracker()
    obs2 = tr2.begin(TurnPlan(0, PAUSED, False, None))
    tr2.speech_onset(obs2, 1.0)
    tr2.feed(SpeechHeard(1.2, 1))
    tr2.feed(ReplyAudio(2.0, 1, 16000, 16000, voiced=True))
    tr2.feed(ReplyAudio(2.1, 1, 64000, 16000, voiced=True))  # 4 s more: 3.0-7.0
    tr2.speech_end(obs2, 5.0)
    assert result(obs2, 0, origin_t=0.0).talked_over_s == pytest.approx(3.0)


def test_a_paused_sentence_the_server_continued_is_one_turn() -> None:
    tr = Tracker()
    obs = tr.begin(TurnPlan(0, PAUSED, False, None))
    tr.speech_onset(obs, 1.0)
    tr.feed(SpeechHeard(1.2, 1))
    tr.feed(TurnContinuedSeen(2.4, 1))  # an end of turn the speaker's going on undid
    tr.speech_end(obs, 3.0)
    tr.feed(ReplyAudio(3.7, 1, 16000, 16000, voiced=True))
    r = result(obs, 0, origin_t=0.0)
    assert r.premature_end is False and r.continued == 1 and r.talked_over_s == 0.0


def test_twilio_cannot_tell_a_premature_end() -> None:
    tr = Tracker()
    obs = tr.begin(TurnPlan(0, PAUSED, False, None))
    tr.speech_onset(obs, 1.0)
    tr.speech_end(obs, 3.0)
    r = result(obs, 0, origin_t=0.0, has_turn_ids=False)
    assert r.paused and r.premature_end is None
