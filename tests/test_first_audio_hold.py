"""A reply never starts over a speaker who has just gone on (the session with fakes on a fake clock).

After the end of a turn, a voice the VAD has heard but not yet long enough to call speech may be
the user going on: the reply's first audio waits (``Continuation.holds``, ``HoldReply``). If it
becomes speech, the turn is continued and nothing of the reply was heard; if it stops (a cough,
a click), the reply goes at once and the record says how long it waited. As in
tests/test_session.py, "speech" is a tone the fake VAD scores 1.0.
"""

from __future__ import annotations

from harness import REPLY, Harness
from polling import until

from voice_pipeline import events as ev
from voice_pipeline.conversation.reply import ReplyOptions
from voice_pipeline.turntaking.ending import FIRST_AUDIO_HOLD_MAX_MS
from voice_pipeline.turntaking.messages import TurnOptions

VOICE_S = 0.04  # two 20 ms chunks: one 32 ms VAD frame voiced, short of vad.min_speech_ms


def played(h: Harness, turn: int) -> list[object]:
    return [c for c in h.transport.playout.chunks if c.turn_id == turn]


async def reply_ready_while_a_voice_is_heard(h: Harness) -> None:
    """The turn ended, its reply is still thinking; a voice begins; then the reply's first
    audio is synthesized."""
    t, d, llm = h.transport, h.driver, h.fakes.llm
    llm.hold_after(0)
    await d.speak(0.6)
    await d.quiet_until(lambda: llm.unfinished_requests() == 1 and bool(t.of(ev.EndpointDetected, 1)))
    await d.speak(VOICE_S)
    llm.release()
    await d.settle()  # (on a busy machine the synthesis may come back later: the fake clock stands still)
    await until(lambda: bool(t.of(ev.ClauseSynthesized, 1)), what="the reply's first audio is ready")


async def test_a_reply_ready_while_the_user_goes_on_is_never_heard(h: Harness) -> None:
    t, d = h.transport, h.driver
    await reply_ready_while_a_voice_is_heard(h)
    assert played(h, 1) == []  # held: the voice may be the user going on
    await d.speak_until(lambda: bool(t.of(ev.TurnContinued, 1)))
    assert played(h, 1) == [] and t.clears(1) == []  # it was: nothing was heard, nothing to flush
    await d.speak(0.3)
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    assert rec.continuations == 1 and rec.assistant_text == REPLY and not rec.interrupted
    assert rec.first_audio_held_ms == 0.0  # the reply that was heard waited for nothing
    assert len(t.of(ev.TurnCompleted)) == 1


async def test_a_cough_holds_the_first_audio_only_while_it_lasts_and_the_record_says_so(h: Harness) -> None:
    t, d = h.transport, h.driver
    await reply_ready_while_a_voice_is_heard(h)
    assert played(h, 1) == []
    cough_end_ns = h.clock()
    await d.quiet(0.1)  # the voice stopped: not the user going on
    assert played(h, 1), "the reply goes once the voice has stopped"
    assert t.time_of(min(c.start for c in played(h, 1))) >= cough_end_ns
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    assert rec.continuations == 0 and rec.assistant_text == REPLY and not rec.interrupted
    assert 0 < rec.first_audio_held_ms <= 100 + 32  # from the audio being ready to the silent frame
    assert rec.as_dict()["first_audio_held_ms"] == round(rec.first_audio_held_ms, 1)
    # the wait was the user's: in voice-to-voice, but no budget broken by it
    assert {"transport", "voice_to_voice"}.isdisjoint(b.stage for b in rec.budgets_broken)
    assert len(t.of(ev.TurnCompleted)) == 1


async def test_a_text_only_reply_is_not_held_up_by_a_voice(h: Harness) -> None:
    """A text-only reply (a realtime ``output_modalities: ["text"]``) has no audio to hold: a
    voice during it changes nothing and it completes."""
    t, d, llm = h.transport, h.driver, h.fakes.llm
    c = h.cfg
    h.session.configure(c.vad, c.turn, c.barge_in, TurnOptions(), ReplyOptions(speak=False))
    llm.hold_after(0)
    await d.speak(0.6)
    await d.quiet_until(lambda: llm.unfinished_requests() == 1 and bool(t.of(ev.EndpointDetected, 1)))
    await d.speak(VOICE_S)
    llm.release()
    await d.quiet_until(lambda: h.completed(1), max_s=5.0)
    rec = h.record(1)
    assert rec.assistant_text == REPLY and not rec.interrupted and rec.continuations == 0
    assert played(h, 1) == [] and h.fakes.tts.texts == []


async def test_a_hold_ends_on_time_when_the_input_stops(h: Harness) -> None:
    """The client stops sending audio while a voice holds the first audio (a realtime client's
    file ended on a click, a muted microphone): the hold still ends at its longest, with no
    frame to end it, and the reply is heard -- never a silent hang."""
    t, d = h.transport, h.driver
    await reply_ready_while_a_voice_is_heard(h)
    assert played(h, 1) == []
    longest_ns = max(FIRST_AUDIO_HOLD_MAX_MS, 2 * h.cfg.vad.min_speech_ms) * 1_000_000
    voice_end_ns = h.clock()
    h.clock.advance(longest_ns // 2)  # no input: only time passes
    await d.settle()
    assert played(h, 1) == [], "held while the voice may still become speech"
    h.clock.advance(longest_ns // 2)
    await d.settle()
    assert played(h, 1), "the hold ended at its longest though no frame came"
    assert t.time_of(min(c.start for c in played(h, 1))) <= voice_end_ns + longest_ns
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    assert rec.continuations == 0 and rec.assistant_text == REPLY and not rec.interrupted
    assert rec.first_audio_held_ms > 0
