"""The speculative reply, with fakes on a fake clock: prepared during the pause, its first
chunk synthesized and held, released at the endpoint or dropped unsent.

As in tests/test_session.py, "speech" is a tone the fake VAD scores 1.0; the fake ASR
returns ``asr.text``; the fake LLM streams ``REPLY`` a word per token.
"""

from __future__ import annotations

import dataclasses

import pytest
from harness import REPLY, Harness, base_config, make_harness

from tts.chunker import ClauseChunker
from voice_pipeline import events as ev
from voice_pipeline.config import Config
from voice_pipeline.conversation.speculation import SpeculationAccount
from voice_pipeline.engines import SpeculationBudget, default_speculation_limit
from voice_pipeline.ledger.records import SpeculationRecord


def first_chunk(text: str, cfg: Config) -> str:
    chunker = ClauseChunker.of(cfg.tts)
    out = [c for word in text.split(" ") for c in chunker.push(word + " ")]
    return (out or list(chunker.flush()))[0]


def with_dialogue(cfg: Config, **changes: object) -> Config:
    return dataclasses.replace(cfg, dialogue=dataclasses.replace(cfg.dialogue, **changes))  # type: ignore[arg-type]


async def test_a_released_reply_sends_the_audio_synthesized_before_the_endpoint(h: Harness) -> None:
    t, d, llm, tts = h.transport, h.driver, h.fakes.llm, h.fakes.tts
    await d.speak(0.5)
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    marks = rec.marks_ns
    # the first chunk was synthesized (and held) before the turn ended, then sent after it
    assert marks["audio_held"] < marks["endpoint"] <= marks["first_audio_sent"]
    assert marks["endpoint"] <= marks["tts_first_audio"] <= marks["first_audio_sent"]
    assert rec.speculation == SpeculationRecord(prepared=1, held=1, released=1)
    # one request, one synthesis of the first chunk (the held one was used, not redone)
    assert len(llm.started) == 1 and llm.started[0].startswith("prefetch-")
    first = first_chunk(REPLY, h.cfg)
    assert tts.texts.count(first) == 1 and tts.texts[0] == first
    assert rec.assistant_text == rec.heard_text == REPLY
    # the stages still add up to voice-to-voice
    parts = ("endpointing", "asr_final", "llm_first_token", "first_clause", "tts_first_audio", "transport")
    assert sum(rec.stages_ms[p] for p in parts) == pytest.approx(rec.stages_ms["voice_to_voice"], abs=1e-6)
    # nothing was sent before the endpoint
    assert t.time_of(min(c.start for c in t.playout.chunks if c.turn_id == 1)) >= marks["endpoint"]


async def test_the_first_chunk_is_synthesized_before_the_token_that_cuts_it(h: Harness) -> None:
    """ "Sure," is only cut once the next token shows a space after the comma; its synthesis
    starts on the chunker's guess, so it is held even while that token is late."""
    d, llm, tts = h.driver, h.fakes.llm, h.fakes.tts
    first = first_chunk(REPLY, h.cfg)
    llm.hold_after(len(first.split()))  # the first chunk's tokens only: its cut not yet known
    await d.speak(0.5)
    await d.quiet_until(lambda: first in tts.texts, max_s=0.2)  # a pause shorter than the end wait
    llm.release()
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    assert rec.speculation == SpeculationRecord(prepared=1, held=1, released=1)
    assert rec.marks_ns["audio_held"] < rec.marks_ns["endpoint"] <= rec.marks_ns["first_audio_sent"]
    assert tts.texts.count(first) == 1 and rec.heard_text == REPLY


async def test_a_wrong_guess_is_wasted_and_the_real_first_chunk_is_held(h: Harness) -> None:
    """ "Well..." would be a chunk before an ordinary word, but not before "maybe" (no split
    before a lower-case letter): the guessed audio is counted as wasted, never sent."""
    t, d, llm, tts = h.transport, h.driver, h.fakes.llm, h.fakes.tts
    llm.reply = "Well... maybe the answer is forty two. Anything else?"
    first = first_chunk(llm.reply, h.cfg)
    assert first != "Well..."
    await d.speak(0.5)
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    assert tts.texts[:2] == ["Well...", first]  # the guess, then the real cut
    assert rec.speculation is not None
    assert (rec.speculation.held, rec.speculation.released) == (1, 1)
    assert rec.speculation.wasted_audio_s == pytest.approx(tts.samples_for("Well...") / 22050, abs=1e-3)
    sent = [c for c in t.playout.chunks if c.turn_id == 1]
    assert sent and rec.heard_text == llm.reply
    assert rec.marks_ns["audio_held"] < rec.marks_ns["endpoint"]


async def test_a_dropped_speculation_aborts_the_request_and_sends_nothing(h: Harness) -> None:
    t, d, llm, tts = h.transport, h.driver, h.fakes.llm, h.fakes.tts
    first = first_chunk(REPLY, h.cfg)
    llm.hold_after(len(first.split()) + 1)  # the first chunk is complete, the request still running
    await d.speak(0.5)
    await d.quiet_until(lambda: first in tts.texts, max_s=0.2)  # held: a pause shorter than the end wait
    assert t.of(ev.EndpointDetected, 1) == [] and t.playout.chunks == []
    h.fakes.asr.text = "what is the answer to everything"
    await d.speak(0.5)  # the user goes on: the speculative reply is dropped
    assert llm.aborted == llm.started[:1]
    assert t.playout.chunks == []  # nothing of it was sent
    llm.release()
    await d.quiet_until(lambda: h.completed(1))
    rec = h.record(1)
    assert rec.speculation is not None
    assert rec.speculation.dropped >= 1 and rec.speculation.held >= 1
    assert rec.speculation.wasted_tokens >= len(first.split())
    assert rec.speculation.wasted_audio_s == pytest.approx(tts.samples_for(first) / 22050, abs=1e-3)
    assert rec.user_text == "what is the answer to everything" and rec.assistant_text == REPLY
    assert llm.unfinished_requests() == 0
    await h.settle_tasks()
    assert h.session.unfinished_tasks() == 0


async def test_with_no_room_the_pause_is_not_speculated_on() -> None:
    """The budget is shared by every session of the engines: when it is full (another
    session speculates), this one answers after the endpoint, as without speculation."""
    h = make_harness()
    h.fakes.llm.reply = REPLY
    budget = h.session._ctx.engines.speculation  # the engines' budget, shared by the sessions
    budget.limit, budget.running = 1, 1
    try:
        await h.driver.speak(0.5)
        await h.driver.quiet_until(lambda: h.completed(1))
        rec = h.record(1)
        assert rec.speculation is not None and rec.speculation.skipped >= 1
        assert rec.speculation.prepared == 0 and not rec.llm_prefetched
        assert rec.assistant_text == REPLY
        assert "audio_held" not in rec.marks_ns
        assert budget.running == 1  # this session took nothing
    finally:
        await h.session.aclose()


async def test_speculative_audio_off_prefetches_the_text_only() -> None:
    h = make_harness(with_dialogue(base_config(), speculative_audio=False))
    h.fakes.llm.reply = REPLY
    try:
        await h.driver.speak(0.5)
        await h.driver.quiet_until(lambda: h.completed(1))
        rec = h.record(1)
        assert rec.llm_prefetched and rec.speculation == SpeculationRecord(prepared=1, released=1)
        assert "audio_held" not in rec.marks_ns
        assert h.session._ctx.engines.speculation.running == 0
    finally:
        await h.session.aclose()


# ---------------------------------------------------------------- pure parts


def test_the_budget_caps_concurrent_speculation() -> None:
    b = SpeculationBudget(2)
    assert [b.try_acquire() for _ in range(3)] == [True, True, False]
    b.release()
    assert b.try_acquire()
    unlimited = SpeculationBudget(0)
    assert all(unlimited.try_acquire() for _ in range(10))
    with pytest.raises(ValueError):
        SpeculationBudget(-1)


@pytest.mark.parametrize(("cores", "limit"), [(1, 1), (2, 1), (4, 2), (8, 4)])
def test_the_default_limit_is_one_per_two_cores(cores: int, limit: int) -> None:
    assert default_speculation_limit(cores) == limit


def test_the_account_becomes_the_record() -> None:
    a = SpeculationAccount(prepared=3, held=2, released=1)
    a.drop(5, 0.25)
    a.drop(2, 0.0)
    assert a.record() == SpeculationRecord(3, 2, 1, 2, 0, 7, 0.25)


# ---------------------------------------------------------------- every reply guesses its first chunk


async def test_a_reply_without_speculation_synthesizes_its_first_chunk_before_the_cut() -> None:
    """No speculative reply: the reply itself starts Piper on the chunker's guess, so "Sure,"
    is synthesized while the token that cuts it is late, and only once."""
    h = make_harness(with_dialogue(base_config(), speculative_start=False))
    d, llm, tts = h.driver, h.fakes.llm, h.fakes.tts
    llm.reply = REPLY
    first = first_chunk(REPLY, h.cfg)
    llm.hold_after(len(first.split()))
    try:
        await d.speak(0.5)
        await d.quiet_until(lambda: first in tts.texts, max_s=2.0)
        assert not [c for c in h.transport.playout.chunks if c.turn_id == 1]  # its cut not known yet
        llm.release()
        await d.quiet_until(lambda: h.completed(1))
        rec = h.record(1)
        assert not rec.llm_prefetched
        assert rec.speculation is None or rec.speculation.held == 0
        assert tts.texts.count(first) == 1 and rec.heard_text == REPLY
        assert rec.work.wasted_audio_s == 0.0
    finally:
        await h.session.aclose()


async def test_a_reply_s_wrong_guess_is_counted_as_wasted_audio() -> None:
    h = make_harness(with_dialogue(base_config(), speculative_start=False))
    d, llm, tts = h.driver, h.fakes.llm, h.fakes.tts
    llm.reply = "Well... maybe the answer is forty two. Anything else?"
    first = first_chunk(llm.reply, h.cfg)
    try:
        await d.speak(0.5)
        await d.quiet_until(lambda: h.completed(1))
        rec = h.record(1)
        assert tts.texts[:2] == ["Well...", first]
        assert rec.heard_text == llm.reply  # the guess was never sent
        assert rec.work.wasted_audio_s == pytest.approx(tts.samples_for("Well...") / 22050, abs=2e-3)
    finally:
        await h.session.aclose()
