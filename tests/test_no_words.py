"""A turn heard as no words, in the session with fakes on a fake clock.

Over a phone line Whisper can hear a short first phrase as silence (a person's "And Mr." at
8 kHz µ-law: "and", no-speech 0.73, log-prob -1.26). Such a turn is not over at once: while its
speaker may go on (``turn.continuation_max_gap_ms`` after their end of speech), speech
continues it, and the final decode has both parts. After the gap it ends with nothing said.
As in tests/test_session.py, "speech" is a tone the fake VAD scores 1.0; the fake ASR returns
``asr.text`` for any audio (and records how much audio each decode had).
"""

from __future__ import annotations

import dataclasses

from harness import REPLY, Harness, base_config, make_harness

from llm.base import ChatMessage
from voice_pipeline import events as ev


async def test_speech_within_the_gap_after_a_turn_heard_as_no_words_continues_it(h: Harness) -> None:
    t, d, asr = h.transport, h.driver, h.fakes.asr
    asr.text = ""  # what Whisper made of "And Mr." over the phone
    await d.speak(0.5)
    await d.quiet_until(lambda: bool(t.of(ev.TranscriptFinalized, 1)))
    assert t.of(ev.TranscriptFinalized, 1)[0].text == ""
    assert not h.completed(1)  # open: its speaker may go on
    asr.text = "and mister john dashwood had then leisure"
    # the speaker goes on, for longer than the gap: the turn stays theirs all along
    await d.speak(h.cfg.turn.continuation_max_gap_ms / 1000 + 0.5)
    await d.quiet_until(lambda: h.completed(1))
    assert t.of(ev.TurnContinued, 1) and t.of(ev.SpeechStarted, 2) == []
    assert t.of(ev.ReplyInterrupted) == []
    rec = h.record(1)
    assert rec.user_text == "and mister john dashwood had then leisure" and rec.assistant_text == REPLY
    assert rec.continuations == 1 and not rec.interrupted
    # one decode of the whole utterance, both parts, nothing cut off while they spoke
    assert asr.decoded_s[-1] >= 0.5 + h.cfg.turn.continuation_max_gap_ms / 1000 + 0.5
    assert h.session.history == [ChatMessage("user", rec.user_text), ChatMessage("assistant", REPLY)]


async def test_a_turn_heard_as_no_words_is_over_after_the_gap_and_interrupts_nothing(h: Harness) -> None:
    t, d, asr, llm = h.transport, h.driver, h.fakes.asr, h.fakes.llm
    asr.text = ""
    await d.speak(0.5)
    await d.quiet_until(lambda: bool(t.of(ev.EndpointDetected, 1)))
    end_ns = t.of(ev.EndpointDetected, 1)[0].speech_end_ns
    await d.quiet_until(lambda: h.completed(1))
    assert h.clock() - end_ns >= h.cfg.turn.continuation_max_gap_ms * 1_000_000  # open for the gap
    rec = h.record(1)
    assert rec.user_text == "" and rec.assistant_text == "" and not rec.interrupted
    assert rec.continuations == 0 and llm.requests == []
    asr.text = "what time is it"
    await d.speak(0.5)
    await d.quiet_until(lambda: h.completed(2))
    assert t.of(ev.ReplyInterrupted) == [] and t.of(ev.TurnContinued) == []
    assert h.record(2).assistant_text == REPLY
    assert h.session.history == [ChatMessage("user", "what time is it"), ChatMessage("assistant", REPLY)]


async def test_without_continuation_a_turn_heard_as_no_words_is_over_at_once() -> None:
    cfg = base_config()
    h = make_harness(dataclasses.replace(cfg, turn=dataclasses.replace(cfg.turn, continuation=False)))
    t, d = h.transport, h.driver
    try:
        h.fakes.asr.text = ""
        await d.speak(0.5)
        await d.quiet_until(lambda: bool(t.of(ev.TranscriptFinalized, 1)))
        await d.quiet(0.1)
        assert h.completed(1) and h.record(1).user_text == ""
        end_ns = t.of(ev.EndpointDetected, 1)[0].speech_end_ns
        assert t.of(ev.TurnCompleted, 1)[0].t_ns - end_ns < cfg.turn.continuation_max_gap_ms * 1_000_000
    finally:
        await h.session.aclose()
