"""Turn-taking in the session with fakes on a fake clock: the semantic end of turn,
continuation instead of interruption, the maximum turn length.

As in tests/test_session.py, "speech" is a tone the fake VAD scores 1.0; the fake ASR
returns ``asr.text`` for any audio (and records how much audio each decode had).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest
from fakes import RATE, Fakes, FakeTurnModel
from harness import REPLY, Harness, base_config, make_harness

from llm.base import ChatMessage
from vad.end_of_turn import EndOfTurnPolicy, Rule
from voice_pipeline import events as ev
from voice_pipeline.config import Config
from voice_pipeline.cpu import parse_cpu
from voice_pipeline.ledger.records import UNDONE_KEPT
from voice_pipeline.tuning import Tuning, choose
from voice_pipeline.turntaking.ending import GAP_LEFT_MS, HESITATION_MARGIN_MS, HESITATION_MIN_MS, Patience

FRAME_S = 512 / RATE


def with_turn(cfg: Config, **changes: object) -> Config:
    return dataclasses.replace(cfg, turn=dataclasses.replace(cfg.turn, **changes))  # type: ignore[arg-type]


def first_audio_ns(h: Harness, turn: int) -> int:
    return h.transport.time_of(min(c.start for c in h.transport.playout.chunks if c.turn_id == turn))


# ---------------------------------------------------------------- continuation


async def test_speech_before_the_reply_is_audible_continues_the_same_turn(h: Harness) -> None:
    t, d, llm, asr = h.transport, h.driver, h.fakes.llm, h.fakes.asr
    llm.hold_after(0)  # thinking: no token, no audio yet
    asr.text = "i would like a table"
    await d.speak(0.6)
    await d.quiet_until(lambda: llm.unfinished_requests() == 1 and bool(t.of(ev.EndpointDetected, 1)))
    first_request = h.llm_requests[0]
    asr.text = "i would like a table for four people"
    await d.speak_until(lambda: bool(t.of(ev.TurnContinued, 1)))
    # the same turn goes on: no new turn, nothing reported as an interruption
    assert t.of(ev.SpeechStarted, 2) == []
    assert t.of(ev.ReplyInterrupted) == [] and t.of(ev.ReplyPaused) == []
    await d.settle()
    assert llm.aborted == [first_request]  # the vLLM request was aborted
    assert llm.unfinished_requests() == 0
    assert t.clears(1) == []  # nothing had been sent: nothing to flush

    llm.release()
    await d.speak(0.5)
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    assert rec.user_text == "i would like a table for four people"
    assert rec.assistant_text == REPLY and not rec.interrupted
    assert rec.continuations == 1
    (undone,) = rec.undone_ends  # how the turn had ended before the user went on
    assert undone.rule is Rule.COMPLETE and undone.silence_ms >= undone.wait_ms > 0  # neutral words, no model
    assert rec.interruption is None and rec.false_interruptions == 0
    assert "barge_in_stop" not in rec.stages_ms
    # the final decode had the whole utterance, both parts (not two transcripts glued)
    assert asr.decoded_s[-1] >= 0.6 + 0.5 + h.cfg.vad.end_silence_ms / 1000
    # one user message in the history, no fragment
    assert h.session.history == [ChatMessage("user", rec.user_text), ChatMessage("assistant", REPLY)]
    # the record measures the whole turn: spoken from the first part's onset to the second's end
    marks = rec.marks_ns
    assert marks["speech_start"] < t.of(ev.TurnContinued, 1)[0].t_ns < marks["speech_end"] < marks["endpoint"]
    assert set(rec.stages_ms) >= {"endpointing", "voice_to_voice"}
    assert rec.end_of_turn is not None and rec.end_of_turn.rule == "complete"
    # the events: the first endpoint (and maybe its transcript), continued, the second
    # endpoint, the final transcript of the whole utterance
    kinds = [
        type(e)
        for e in t.events
        if isinstance(e, ev.EndpointDetected | ev.TurnContinued | ev.TranscriptFinalized)
    ]
    assert kinds in (
        [ev.EndpointDetected, ev.TurnContinued, ev.EndpointDetected, ev.TranscriptFinalized],
        [
            ev.EndpointDetected,
            ev.TranscriptFinalized,
            ev.TurnContinued,
            ev.EndpointDetected,
            ev.TranscriptFinalized,
        ],
    )
    assert t.of(ev.TranscriptFinalized, 1)[-1].text == rec.user_text
    assert len(t.of(ev.TurnCompleted)) == 1
    await h.settle_tasks()
    assert h.session.unfinished_tasks() == 0
    assert not h.session.busy


async def test_a_continued_speaker_is_waited_for_longer_and_the_ledger_says_why(h: Harness) -> None:
    t, d, llm, asr = h.transport, h.driver, h.fakes.llm, h.fakes.asr
    short, patience = h.cfg.vad.end_silence_ms, h.cfg.turn.patience_ms
    assert patience > 0  # on by default
    llm.hold_after(0)
    asr.text = "i need eggs"
    await d.speak(0.6)
    await d.quiet_until(lambda: bool(t.of(ev.EndpointDetected, 1)))
    e = t.of(ev.EndpointDetected, 1)[0]
    assert e.t_ns - e.speech_end_ns < (short + patience) * 1_000_000  # a first turn: the short wait
    asr.text = "i need eggs and some bread"
    await d.speak_until(lambda: bool(t.of(ev.TurnContinued, 1)))
    llm.release()
    await d.speak(0.4)
    await d.quiet_until(lambda: h.completed(1))
    first = h.record(1).end_of_turn
    assert first is not None and first.rule == "complete"
    # the speaker went on after an end of turn: this end waited the short silence and the patience
    assert (first.wait_ms, first.patience_ms) == (short + patience, patience)
    assert first.silence_ms >= short + patience
    # ... on purpose: it is not a breach of the endpointing budget
    assert "endpointing" not in {b.stage for b in h.record(1).budgets_broken}
    # the next turn is waited for in full too, the one after it a quarter less
    asr.text = "what is the time?"
    for turn, extra in ((2, patience), (3, patience - patience // 4)):
        await d.speak(0.5)
        await d.quiet_until(lambda turn=turn: h.completed(turn))  # type: ignore[misc]
        rec = h.record(turn).end_of_turn
        assert rec is not None and (rec.wait_ms, rec.patience_ms) == (short + extra, extra)


async def test_a_speaker_who_went_on_after_a_long_pause_is_waited_for_that_long_short_of_the_gap(
    h: Harness,
) -> None:
    """The card list at +1.3 s (tests/test_e2e_recorded_speech.py): the first item was answered
    and the speaker went on 1.3 s into the pause; the short wait and the patience (1250 ms) were
    shorter than that, so their next such pause was answered too."""
    t, d, llm = h.transport, h.driver, h.fakes.llm
    gap, short = h.cfg.turn.continuation_max_gap_ms, h.cfg.vad.end_silence_ms
    llm.hold_after(0)  # no reply audible: the pause is the speaker's own, however long
    await d.speak(0.6)
    await d.quiet_until(lambda: bool(t.of(ev.EndpointDetected, 1)))
    await d.quiet(1.3 - short / 1000)
    await d.speak_until(lambda: bool(t.of(ev.TurnContinued, 1)))
    llm.release()
    await d.speak(0.4)
    await d.quiet_until(lambda: h.completed(1))
    end = h.record(1).end_of_turn
    assert end is not None and end.wait_ms == gap - GAP_LEFT_MS  # not 1500 + 200: short of the gap
    assert end.patience_ms == gap - GAP_LEFT_MS - short > h.cfg.turn.patience_ms


@pytest.mark.parametrize("stated", [1400, None])
async def test_a_statement_wait_is_the_deployments_and_a_question_keeps_the_short_wait(
    stated: int | None,
) -> None:
    """``turn.statement_silence_ms`` set: a statement ends after it, not a budget breach; a
    question (a "?") after the short wait. Unset, both end after the short wait."""
    h = make_harness(with_turn(base_config(), statement_silence_ms=stated))
    try:
        d, asr, short = h.driver, h.fakes.asr, h.cfg.vad.end_silence_ms
        for turn, text in ((1, "i need eggs"), (2, "what is the time?")):
            asr.text = text
            await d.speak(0.5)
            waited = await d.quiet_until(lambda turn=turn: h.completed(turn))  # type: ignore[misc]
            rec = h.record(turn)
            end = rec.end_of_turn
            assert end is not None and end.rule == "complete" and end.patience_ms == 0
            wait_ms = stated if stated and text == "i need eggs" else short
            assert end.wait_ms == wait_ms and end.silence_ms >= wait_ms and waited * 1000 >= wait_ms
            assert "endpointing" not in {b.stage for b in rec.budgets_broken}, rec.budgets_broken
        assert rec.stages_ms["endpointing"] < h.cfg.budget.endpointing_ms  # the question's
    finally:
        h.fakes.llm.release()
        await h.session.aclose()


async def test_patience_off_keeps_the_short_wait_after_a_continuation() -> None:
    h = make_harness(with_turn(base_config(), patience_ms=0))
    try:
        t, d, llm = h.transport, h.driver, h.fakes.llm
        llm.hold_after(0)
        await d.speak(0.6)
        await d.quiet_until(lambda: bool(t.of(ev.EndpointDetected, 1)))
        await d.speak_until(lambda: bool(t.of(ev.TurnContinued, 1)))
        llm.release()
        await d.speak(0.4)
        await d.quiet_until(lambda: h.completed(1))
        rec = h.record(1).end_of_turn
        assert rec is not None and (rec.wait_ms, rec.patience_ms) == (h.cfg.vad.end_silence_ms, 0)
    finally:
        h.fakes.llm.release()
        await h.session.aclose()


def test_patience_counts_only_the_ends_the_policy_chose() -> None:
    p = Patience(1000, used_from_ms=500)
    for rule in (Rule.PUSH_TO_TALK, Rule.COMMIT, Rule.MAX_TURN, Rule.SILENCE, None):
        p.continued(rule)
        assert p.extra_ms == 0
    p.continued(Rule.NO_VERDICT)
    assert p.extra_ms == 1000
    p.new_turn()  # the turn after a continuation: in full
    assert p.extra_ms == 1000
    steps = []
    for _ in range(5):
        p.new_turn()
        steps.append(p.extra_ms)
    assert steps == [750, 500, 250, 0, 0]
    base = EndOfTurnPolicy(250, 500, 2000)
    assert p.policy(base) is base and p.policy(None) is None
    p.continued(Rule.COMPLETE)
    assert p.policy(base) == dataclasses.replace(base, patience_ms=1000)


def test_patience_stays_while_the_speaker_goes_on_after_the_pauses_it_kept() -> None:
    p = Patience(1000, used_from_ms=500)
    p.resumed(1200)  # no patience yet: a long pause held by the words is a hesitation, this turn's only
    assert p.extra_ms == 0
    p.continued(Rule.COMPLETE)
    p.new_turn()
    p.new_turn()
    assert p.extra_ms == 750
    p.resumed(400)  # shorter than the medium wait: the policy alone would have kept it
    p.new_turn()
    assert p.extra_ms == 500
    p.resumed(900)  # a pause patience kept: in full again, and for the next turn too
    assert p.extra_ms == 1000
    p.new_turn()
    assert p.extra_ms == 1000
    p.new_turn()
    assert p.extra_ms == 750


def test_patience_covers_the_longest_pause_the_speaker_went_on_after_short_of_the_gap() -> None:
    p = Patience(1000, used_from_ms=500, max_gap_ms=1500)
    base = EndOfTurnPolicy(250, 500, 2000)
    p.continued(Rule.COMPLETE, 600)  # undone 600 ms into the pause: the patience covers it
    assert p.policy(base) == dataclasses.replace(base, patience_ms=1000)
    p.resumed(1100)  # a pause patience kept: the speaker's next may be longer
    assert p.policy(base) == dataclasses.replace(base, patience_ms=1100 + HESITATION_MARGIN_MS - 250)
    p.resumed(1248)  # one kept by 2 ms (the card list at +1.2 s): never so long that the speaker
    assert p.policy(base) == dataclasses.replace(base, patience_ms=1500 - GAP_LEFT_MS - 250)
    p.continued(Rule.COMPLETE, 1450)  # could not go on after the end (within the gap)
    assert p.policy(base) == dataclasses.replace(base, patience_ms=1500 - GAP_LEFT_MS - 250)
    p.new_turn()  # kept: the next turn waits as long
    assert p.policy(base) == dataclasses.replace(base, patience_ms=1500 - GAP_LEFT_MS - 250)
    p.new_turn()  # a turn without such a pause: back to the patience, a quarter less
    assert p.policy(base) == dataclasses.replace(base, patience_ms=750)
    p.continued(Rule.COMMIT, 1450)  # not an end the policy chose
    assert p.policy(base) == dataclasses.replace(base, patience_ms=750)
    uncapped = Patience(1000, used_from_ms=500)  # no continuation gap: the long wait caps it
    uncapped.continued(Rule.COMPLETE, 2500)
    assert uncapped.policy(base) == dataclasses.replace(base, patience_ms=2000 - 250)


def test_a_hesitation_raises_the_short_wait_to_the_pause_for_the_rest_of_the_turn() -> None:
    p = Patience(1000, used_from_ms=500, max_gap_ms=1500)
    base = EndOfTurnPolicy(250, 500, 2000)
    p.resumed(HESITATION_MIN_MS - 1)  # the pauses of fluent speech: no hesitation
    assert p.policy(base) is base
    p.resumed(540)  # the words held this pause: the short wait covers it and the margin
    assert p.policy(base) == dataclasses.replace(base, patience_ms=540 + HESITATION_MARGIN_MS - 250)
    p.resumed(520)  # the longest hesitation counts
    assert p.policy(base) == dataclasses.replace(base, patience_ms=540 + HESITATION_MARGIN_MS - 250)
    p.resumed(1120)  # a person's pause made 1.2 s longer: more than the patience, ...
    assert p.policy(base) == dataclasses.replace(base, patience_ms=1120 + HESITATION_MARGIN_MS - 250)
    p.resumed(1700)  # ... short of the continuation gap
    assert p.policy(base) == dataclasses.replace(base, patience_ms=1500 - GAP_LEFT_MS - 250)
    assert p.extra_ms == 0  # nothing of it for the next turn
    p.new_turn()
    assert p.policy(base) is base
    # after a continuation the session's patience, if greater, is what counts
    p.continued(Rule.COMPLETE)
    p.resumed(600)
    assert p.policy(base) == dataclasses.replace(base, patience_ms=1000)
    uncapped = Patience(1000, used_from_ms=500)  # no continuation gap: the long wait caps it
    uncapped.resumed(1900)
    assert uncapped.policy(base) == dataclasses.replace(base, patience_ms=2000 - 250)
    person = Patience(1000, used_from_ms=500)
    person.resumed(384)  # what the VAD measured of a person's 0.5 s pause (tests/data/human)
    assert person.policy(base) == dataclasses.replace(base, patience_ms=384 + HESITATION_MARGIN_MS - 250)
    off = Patience(0, used_from_ms=500)  # patience off: no hesitation either
    off.resumed(1500)
    assert off.policy(base) is base


async def test_speech_within_the_grace_after_the_first_audio_continues_and_flushes_it(h: Harness) -> None:
    t, d, llm, asr = h.transport, h.driver, h.fakes.llm, h.fakes.asr
    await d.speak(0.5)
    await d.quiet_until(lambda: t.played_samples(1) > 0)
    audible_at = first_audio_ns(h, 1)
    played_before = t.played_samples(1)
    asr.text = "and in paris"
    await d.speak_until(lambda: bool(t.of(ev.TurnContinued, 1)), max_s=1.0)
    assert h.clock() - audible_at <= (h.cfg.turn.continuation_grace_ms + 250) * 1_000_000
    assert t.clears(1)  # what was queued is flushed at once
    dropped = t.played_samples(1)
    assert dropped >= played_before
    assert t.of(ev.SpeechStarted, 2) == []
    await d.speak(0.3)
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    assert rec.continuations == 1 and not rec.interrupted
    assert rec.discarded_tokens > 0 and rec.discarded_audio_s > 0  # the dropped reply's work
    # what was heard is the new reply's own audio, not counting the dropped one's
    assert rec.work.audio_heard_s == pytest.approx((t.played_samples(1) - dropped) / 22050)
    assert rec.heard_text == rec.assistant_text == REPLY
    assert len(llm.requests) == 2 and llm.unfinished_requests() == 0
    assert h.session.history[-2:] == [ChatMessage("user", "and in paris"), ChatMessage("assistant", REPLY)]


async def test_speech_within_the_gap_continues_however_long_the_reply_has_played(h: Harness) -> None:
    """A fast machine: the reply is audible soon after the end of turn, and the speaker goes on
    1.0 s after its first audio (past the old 900 ms grace) but within
    ``turn.continuation_max_gap_ms`` of their own end of speech. With the defaults the gap alone
    decides, whatever the machine's speed: the turn continues (session 26)."""
    t, d, llm, asr = h.transport, h.driver, h.fakes.llm, h.fakes.asr
    llm.hold_after(16)  # still playing when the speaker goes on
    await d.speak(0.5)
    spoke_until = h.clock()
    await d.quiet_until(lambda: t.played_samples(1) > 0)
    audible_at = first_audio_ns(h, 1)
    await d.quiet(1.0 - (h.clock() - audible_at) / 1e9)
    assert h.clock() - audible_at >= 1_000_000_000  # past the old 900 ms grace
    assert (h.clock() - spoke_until) / 1e6 < h.cfg.turn.continuation_max_gap_ms - 100  # within the gap
    asr.text = "and in paris"
    await d.speak_until(lambda: bool(t.of(ev.TurnContinued, 1)), max_s=1.0)
    assert t.of(ev.ReplyInterrupted) == [] and t.of(ev.SpeechStarted, 2) == []
    llm.release()
    await d.speak(0.3)
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    assert rec.continuations == 1 and not rec.interrupted


async def test_speech_after_the_grace_is_a_barge_in(h: Harness) -> None:
    t, d, llm, asr = h.transport, h.driver, h.fakes.llm, h.fakes.asr
    llm.hold_after(8)
    await d.speak(0.5)
    await d.quiet_until(lambda: t.played_samples(1) > 0)
    await d.quiet((h.cfg.turn.continuation_grace_ms + 100) / 1000)
    asr.text = "tell me more"
    await d.speak_until(lambda: bool(t.of(ev.ReplyPaused, 1)))
    assert t.of(ev.TurnContinued) == []
    assert t.of(ev.SpeechStarted, 2)
    await d.speak(0.2)
    llm.release()
    await d.quiet_until(lambda: h.completed(1) and h.completed(2))
    assert h.record(1).interrupted and h.record(2).interruption == "words"
    assert h.record(1).continuations == 0


async def test_speech_after_the_maximum_gap_is_a_new_turn_however_slow_the_reply(h: Harness) -> None:
    """A slow machine: the reply to the first question is still not audible when the user
    says something new, past ``turn.continuation_max_gap_ms`` after their end of speech.
    That is a new turn, not a continuation: the unheard reply is dropped (nothing of it is
    sent), both messages stay separate in the history, and one reply answers both."""
    t, d, llm, asr = h.transport, h.driver, h.fakes.llm, h.fakes.asr
    llm.hold_after(0)  # the machine is slow: no token yet
    asr.text = "what time is it"
    await d.speak(0.6)
    await d.quiet_until(lambda: bool(t.of(ev.EndpointDetected, 1)))
    end_ns = t.of(ev.EndpointDetected, 1)[0].speech_end_ns
    await d.quiet((h.cfg.turn.continuation_max_gap_ms + 200) / 1000 - (h.clock() - end_ns) / 1e9)
    assert t.of(ev.ReplyStarted, 1) and t.played_samples(1) == 0  # asked, not heard
    asr.text = "and what day is it"
    await d.speak_until(lambda: bool(t.of(ev.SpeechStarted, 2)))
    assert t.of(ev.TurnContinued) == []
    assert [i.reason for i in t.of(ev.ReplyInterrupted, 1)] == ["user speech before the reply was heard"]
    llm.release()
    await d.speak(0.4)
    await d.quiet_until(lambda: h.completed(1) and h.completed(2))
    assert not [c for c in t.playout.chunks if c.turn_id == 1]  # nothing of the first reply was sent
    assert h.record(1).assistant_text == "" and h.record(1).heard_text == ""
    assert h.record(2).assistant_text == REPLY and not h.record(2).interrupted
    # the answer was asked with both messages, separate, in order
    users = [m.content for m in llm.requests[-1].messages if m.role == "user"]
    assert users == ["what time is it", "and what day is it"]
    assert [m.content for m in h.session.history] == ["what time is it", "and what day is it", REPLY]
    assert llm.unfinished_requests() == 0


async def test_speech_within_the_maximum_gap_still_continues(h: Harness) -> None:
    """The same slow reply, and the user goes on just inside the gap: one turn, as before."""
    t, d, llm, asr = h.transport, h.driver, h.fakes.llm, h.fakes.asr
    llm.hold_after(0)
    asr.text = "what time is it"
    await d.speak(0.6)
    await d.quiet_until(lambda: bool(t.of(ev.EndpointDetected, 1)))
    end_ns = t.of(ev.EndpointDetected, 1)[0].speech_end_ns
    await d.quiet((h.cfg.turn.continuation_max_gap_ms - 300) / 1000 - (h.clock() - end_ns) / 1e9)
    asr.text = "what time is it in tokyo"
    await d.speak_until(lambda: bool(t.of(ev.TurnContinued, 1)))
    assert t.of(ev.SpeechStarted, 2) == []
    llm.release()
    await d.speak(0.3)
    await d.quiet_until(lambda: h.completed(1))
    assert h.record(1).continuations == 1 and h.record(1).user_text == "what time is it in tokyo"


async def test_continuation_off_speech_before_the_reply_is_heard_is_a_new_turn() -> None:
    h = make_harness(with_turn(base_config(), continuation=False))
    t, d, llm = h.transport, h.driver, h.fakes.llm
    try:
        llm.hold_after(0)
        await d.speak(0.4)
        await d.quiet_until(lambda: bool(t.of(ev.EndpointDetected, 1)))
        await d.speak_until(lambda: bool(t.of(ev.SpeechStarted, 2)))
        assert [i.reason for i in t.of(ev.ReplyInterrupted, 1)] == ["user speech before the reply was heard"]
        assert t.of(ev.TurnContinued) == []
    finally:
        llm.release()
        await h.session.aclose()


async def test_a_hundred_continuations_leave_nothing_running(h: Harness) -> None:
    t, d, llm = h.transport, h.driver, h.fakes.llm
    llm.hold_after(3)
    await d.speak(0.3)
    for i in range(100):
        await d.quiet_until(lambda n=i + 1: len(t.of(ev.EndpointDetected)) == n)
        if i % 2:  # after the LLM started on the transcript
            await d.quiet_until(lambda n=i + 1: len(llm.started) == n, max_s=1.0)
        await d.speak_until(lambda n=i + 1: len(t.of(ev.TurnContinued)) == n, max_s=1.0)
        await d.speak(0.1)
    llm.release()
    await d.quiet_until(lambda: h.completed(1))
    await h.settle_tasks()
    rec = h.record(1)
    assert rec.continuations == 100 and not rec.interrupted and rec.assistant_text == REPLY
    # each end the user undid is in the record (the first UNDONE_KEPT of them), with its rule
    assert len(rec.undone_ends) == UNDONE_KEPT and rec.end_of_turn is not None
    assert all(e.rule is rec.end_of_turn.rule for e in rec.undone_ends), rec.undone_ends
    assert h.session.unfinished_tasks() == 0
    assert llm.unfinished_requests() == 0
    assert llm.finished == [llm.started[-1]]
    assert sorted(llm.aborted) == sorted(llm.started[:-1])
    assert len(t.of(ev.TurnCompleted)) == 1 and t.of(ev.SpeechStarted, 2) == []
    assert len(h.session.history) == 2


# ---------------------------------------------------------------- the semantic end of turn


async def test_an_unfinished_sentence_is_not_cut_at_a_pause(h: Harness) -> None:
    """The words end in a preposition: a 1 s pause does not end the turn."""
    t, d, asr = h.transport, h.driver, h.fakes.asr
    asr.text = "i would like to book a table for"
    await d.speak(0.6)
    await d.quiet(1.0)
    assert t.of(ev.EndpointDetected) == []
    assert h.fakes.llm.requests == []  # no prefetch on an unfinished sentence
    asr.text = "i would like to book a table for four people"
    await d.speak(0.5)
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    assert rec.user_text == "i would like to book a table for four people"
    assert (
        rec.end_of_turn is not None
        and rec.end_of_turn.rule == "complete"
        and rec.end_of_turn.cue == "neutral"
    )
    assert rec.continuations == 0
    assert len(t.of(ev.EndpointDetected)) == 1


async def test_a_speaker_who_trails_off_gets_an_answer_after_the_long_wait(h: Harness) -> None:
    t, d, asr = h.transport, h.driver, h.fakes.asr
    asr.text = "so i was thinking about the"
    await d.speak(0.6)
    waited = await d.quiet_until(lambda: bool(t.of(ev.EndpointDetected, 1)))
    assert waited >= h.cfg.turn.incomplete_silence_ms / 1000
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    assert rec.end_of_turn is not None
    assert (rec.end_of_turn.rule, rec.end_of_turn.cue) == ("incomplete", "incomplete")
    assert rec.end_of_turn.wait_ms == h.cfg.turn.incomplete_silence_ms
    assert rec.end_of_turn.silence_ms >= rec.end_of_turn.wait_ms
    # a wait the policy chose for the user is not a budget breach of the pipeline
    assert "endpointing" not in {b.stage for b in rec.budgets_broken}
    assert rec.stages_ms["endpointing"] > h.cfg.budget.endpointing_ms


async def test_the_turn_model_holds_a_turn_that_sounds_unfinished() -> None:
    fakes = Fakes(turn=FakeTurnModel(p=0.05))
    h = make_harness(base_config(), fakes)
    t, d = h.transport, h.driver
    try:
        await d.speak(0.6)
        await d.quiet(1.0)
        assert t.of(ev.EndpointDetected) == []  # "what is the answer" reads neutral, sounds unfinished
        assert fakes.turn is not None and fakes.turn.audio_s and fakes.turn.audio_s[0] >= 0.6
        fakes.turn.p = 0.95
        await d.speak(0.3)
        await d.quiet_until(lambda: h.completed(1))
        rec = h.record(1)
        assert rec.end_of_turn is not None and rec.end_of_turn.rule == "complete"
        assert rec.end_of_turn.p_complete == pytest.approx(0.95)
        assert rec.end_of_turn.sound_after_ms is not None and rec.end_of_turn.words_after_ms is not None
    finally:
        await h.session.aclose()


def tuned_for(flags: str) -> Tuning:
    cfg = base_config()
    return choose(parse_cpu(f"model name\t: CPU\nflags\t\t: {flags}\n", 2, {}), cfg.llm, cfg.asr, cfg.turn)


@pytest.mark.parametrize(("flags", "at_pause"), [("avx avx2 fma", True), ("avx2 avx512f avx512_bf16", False)])
@pytest.mark.parametrize(
    ("text", "cue"), [("what is the answer?", "complete"), ("what is the answer", "neutral")]
)
async def test_the_turn_model_runs_where_the_machine_chose(
    flags: str, at_pause: bool, text: str, cue: str
) -> None:
    """``turn.model_start: auto``: on AVX2 the model starts at the pause, beside the decode
    (``early``); on AVX-512 after the words, and only if they are neutral. Either way its
    verdict is used only after neutral words: the same decisions on both classes."""
    fakes = Fakes(turn=FakeTurnModel(p=0.2), tuning=tuned_for(flags))  # sounds unfinished
    fakes.asr.text = text
    h = make_harness(base_config(), fakes)
    try:
        await h.driver.speak(0.6)
        await h.driver.quiet_until(lambda: h.completed(1), max_s=5.0)
        assert fakes.turn is not None
        ran = bool(fakes.turn.audio_s)
        assert ran is (at_pause or cue == "neutral")
        eot = h.record(1).end_of_turn
        assert eot is not None and eot.cue == cue
        if cue == "complete":  # the words decide: the short wait, the sound not used
            assert eot.rule == "complete" and eot.p_complete is None
        else:  # neutral words, an unfinished sound: the long wait, its verdict recorded
            assert eot.rule == "incomplete" and eot.p_complete == pytest.approx(0.2)
    finally:
        await h.session.aclose()


async def test_a_turn_model_started_at_a_pause_stops_when_the_speaker_goes_on() -> None:
    """On AVX2 the model starts at the pause, beside the decode (``early``). When the speaker
    goes on, its verdict is void and its thread stops: run to the end, it took a core from the
    decode of the next pause (a 2-core AVX2 EPYC: 300-400 ms each)."""
    fakes = Fakes(turn=FakeTurnModel(p=0.9), tuning=tuned_for("avx avx2 fma"))
    turn = fakes.turn
    assert turn is not None
    turn.hold = threading.Event()  # the model is slow: still running when speech resumes
    fakes.asr.text = "what is the answer"
    h = make_harness(base_config(), fakes)
    try:
        await h.driver.speak(0.6)
        await h.driver.quiet(0.1)  # a pause: the model starts beside the decode
        assert len(turn.audio_s) == 1 and turn.stopped == 0
        await h.driver.speak(0.6)  # the speaker went on
        for _ in range(500):
            if turn.stopped:
                break
            await asyncio.sleep(0.01)
        assert turn.stopped == 1
        turn.hold.set()
        await h.driver.quiet_until(lambda: h.completed(1))
        assert len(turn.audio_s) == 2  # the real end's
        eot = h.record(1).end_of_turn
        assert eot is not None and eot.p_complete == pytest.approx(0.9)
    finally:
        turn.hold.set()
        await h.session.aclose()


async def test_with_no_room_the_turn_model_waits_for_the_words() -> None:
    """On AVX2 with the speculation budget full (other sessions speculate) the model is not
    started beside the decode: it runs only after neutral words, as on a fast CPU."""
    fakes = Fakes(turn=FakeTurnModel(p=0.9), tuning=tuned_for("avx avx2 fma"))
    fakes.asr.text = "what is the answer?"
    h = make_harness(base_config(), fakes)
    budget = h.session._ctx.engines.speculation
    budget.limit, budget.running = 1, 1
    try:
        await h.driver.speak(0.6)
        await h.driver.quiet_until(lambda: h.completed(1))
        assert fakes.turn is not None and fakes.turn.audio_s == []
    finally:
        await h.session.aclose()


@pytest.mark.parametrize("busy", ["asr", "llm"])
async def test_with_other_work_on_the_engines_the_turn_model_waits_for_the_words(
    busy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On AVX2 with another session's decode on the shared Whisper engine, or its reply on the
    LLM, the model is not started beside them (on 2 cores it slows both): it runs only after
    neutral words, as on a fast CPU. With the engines idle it would have run (the test above)."""
    fakes = Fakes(turn=FakeTurnModel(p=0.9), tuning=tuned_for("avx avx2 fma"))
    fakes.asr.text = "what is the answer?"
    h = make_harness(base_config(), fakes)
    load = h.session._ctx.engines.asr_load
    assert load is not None
    if busy == "asr":
        load.begin()  # another session's decode, still running at this one's pause
    else:
        own = fakes.llm.unfinished_requests
        monkeypatch.setattr(fakes.llm, "unfinished_requests", lambda: own() + 1)  # another's reply
    try:
        await h.driver.speak(0.6)
        await h.driver.quiet_until(lambda: h.completed(1))
        assert fakes.turn is not None and fakes.turn.audio_s == []
        assert h.record(1).end_of_turn is not None
    finally:
        if busy == "asr":
            load.end()
        await h.session.aclose()


async def test_a_failing_turn_model_only_loses_its_vote() -> None:
    fakes = Fakes(turn=FakeTurnModel())
    assert fakes.turn is not None
    fakes.turn.error = RuntimeError("onnxruntime broke")
    h = make_harness(base_config(), fakes)
    try:
        await h.driver.speak(0.5)
        waited = await h.driver.quiet_until(lambda: bool(h.transport.of(ev.EndpointDetected, 1)))
        assert waited <= (h.cfg.vad.end_silence_ms + 100) / 1000  # the words and the silence decide
        await h.driver.quiet_until(lambda: h.completed(1))
        assert h.record(1).assistant_text == h.fakes.llm.reply
    finally:
        await h.session.aclose()


async def test_semantic_off_ends_on_silence_alone() -> None:
    h = make_harness(with_turn(base_config(), semantic=False), Fakes(turn=FakeTurnModel(p=0.0)))
    try:
        h.fakes.asr.text = "book a table for"
        await h.driver.speak(0.5)
        waited = await h.driver.quiet_until(lambda: bool(h.transport.of(ev.EndpointDetected, 1)))
        assert waited <= (h.cfg.vad.end_silence_ms + 100) / 1000
        await h.driver.quiet_until(lambda: h.completed(1))
        rec = h.record(1)
        assert rec.end_of_turn is not None and rec.end_of_turn.rule == "silence"
        assert h.fakes.turn is not None and h.fakes.turn.audio_s == []  # not even asked
    finally:
        await h.session.aclose()


# ---------------------------------------------------------------- the maximum turn length


async def test_babble_cannot_hold_a_turn_open() -> None:
    cfg = dataclasses.replace(base_config(), vad=dataclasses.replace(base_config().vad, max_turn_s=2.0))
    h = make_harness(cfg)
    t, d = h.transport, h.driver
    try:
        h.fakes.llm.hold_after(0)
        await d.speak(5.0)  # a TV that never stops
        ends = t.of(ev.EndpointDetected)
        assert len(ends) == 2  # at 2 s and at 4 s of babble
        assert t.of(ev.TurnContinued) == []  # a turn cut by the limit is never continued
        assert [i.reason for i in t.of(ev.ReplyInterrupted)] == ["user speech before the reply was heard"] * 2
        await d.settle()
        assert h.fakes.asr.decoded_s and max(h.fakes.asr.decoded_s) <= 2.0 + 0.2
        assert h.session.sizes()["turns_open"] <= 2
    finally:
        h.fakes.llm.release()
        await h.session.aclose()


# ---------------------------------------------------------------- the prefix cache, warmed ahead


async def test_the_prompt_prefix_is_prefilled_while_the_user_speaks_and_dropped_for_the_real_request() -> (
    None
):
    cfg = dataclasses.replace(
        base_config(), asr=dataclasses.replace(base_config().asr, partial_interval_ms=0)
    )
    h = make_harness(cfg)
    llm, d = h.fakes.llm, h.driver
    try:
        llm.reply = REPLY
        await d.speak(0.5)
        # at speech start the system prompt is warmed (one block of 32 estimated tokens or more)
        assert [r.messages[0] for r in llm.prefills] == [ChatMessage("system", cfg.dialogue.system_prompt)]
        await d.quiet_until(lambda: h.completed(1))
        # a reply heard to its end cached the new history by generating it: no prefill for it
        assert len(llm.prefills) == 1
        rec = h.record(1)
        assert rec.llm_prompt_tokens is not None  # the reply's request figures reach the ledger
        # a reply cut short leaves history the cache has not seen: that is prefilled (when it
        # adds a whole block of 32 tokens: a long question)
        h.fakes.asr.text = "tell me everything you know about the history of the city of paris " * 2
        llm.hold_after(8)
        await d.speak(0.5)
        await d.quiet_until(lambda: h.transport.played_samples(2) > 0)
        h.session.interrupt()
        llm.release()
        await d.quiet_until(lambda: h.completed(2))
        await d.settle()
        assert len(llm.prefills) == 2
        assert llm.prefills[-1].messages[1:] == tuple(h.session.history)
        await h.settle_tasks()
        assert llm.unfinished_requests() == 0
    finally:
        await h.session.aclose()


async def test_no_prefill_when_prefill_ahead_is_off() -> None:
    cfg = base_config()
    cfg = dataclasses.replace(cfg, dialogue=dataclasses.replace(cfg.dialogue, prefill_ahead=False))
    h = make_harness(cfg)
    try:
        await h.driver.speak(0.5)
        await h.driver.quiet_until(lambda: h.completed(1))
        assert h.fakes.llm.prefills == []
    finally:
        await h.session.aclose()
