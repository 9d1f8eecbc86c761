"""A reply's first chunk sent head first (``tts.head_first``), with fakes on a fake clock.

The fake engine (:class:`fakes.HeadFirstTTS`) gives the first quarter of a chunk at once and
the rest when asked, as PiperTTS does with its decoder cut (``tests/test_tts_head_first.py``,
``tests/test_tts_piper.py``).
"""

from __future__ import annotations

import dataclasses

from fakes import Fakes, HeadFirstTTS
from harness import REPLY, Harness, base_config, make_harness

from tts.chunker import ClauseChunker
from voice_pipeline.config import Config
from voice_pipeline.ledger.records import SpeculationRecord


def first_chunk(text: str, cfg: Config) -> str:
    chunker = ClauseChunker.of(cfg.tts)
    out = [c for word in text.split(" ") for c in chunker.push(word + " ")]
    return (out or list(chunker.flush()))[0]


def harness(cfg: Config) -> tuple[Harness, HeadFirstTTS]:
    tts = HeadFirstTTS()
    h = make_harness(cfg, Fakes(tts=tts))
    tts.clock = h.clock
    h.fakes.llm.reply = REPLY
    return h, tts


def sent_samples(h: Harness, turn: int) -> int:
    return sum(len(c) for c in h.transport.audio.get(turn, []))


async def test_a_held_first_chunk_is_its_head_and_the_rest_is_decoded_once_it_is_sent() -> None:
    h, tts = harness(base_config())
    first = first_chunk(REPLY, h.cfg)
    try:
        await h.driver.speak(0.5)
        await h.driver.quiet_until(lambda: h.completed(1))
        rec = h.record(1)
        assert rec.speculation == SpeculationRecord(prepared=1, held=1, released=1)
        # the head was synthesized (and held) before the endpoint; the rest only after the
        # head was sent, and only once; every later clause whole
        assert tts.calls[:2] == [("head", first), ("rest", first)]
        assert all(kind == "whole" for kind, _ in tts.calls[2:]) and len(tts.calls) > 2
        marks = rec.marks_ns
        assert marks["audio_held"] < marks["endpoint"] <= marks["first_audio_sent"] <= tts.rest_at[0]
        # all of it was sent and heard: head and rest add up to the whole chunk
        clauses = [first, *(text for _, text in tts.calls[2:])]
        assert sent_samples(h, 1) == sum(tts.samples_for(c) for c in clauses)
        assert rec.assistant_text == rec.heard_text == REPLY
    finally:
        await h.session.aclose()


async def test_a_reply_without_speculation_sends_its_first_chunk_head_first_too() -> None:
    cfg = base_config()
    h, tts = harness(
        dataclasses.replace(cfg, dialogue=dataclasses.replace(cfg.dialogue, speculative_start=False))
    )
    first = first_chunk(REPLY, h.cfg)
    try:
        await h.driver.speak(0.5)
        await h.driver.quiet_until(lambda: h.completed(1))
        rec = h.record(1)
        assert not rec.llm_prefetched
        assert tts.calls[:2] == [("head", first), ("rest", first)]
        assert [kind for kind, _ in tts.calls[2:]] == ["whole"] * (len(tts.calls) - 2)
        assert rec.marks_ns["first_audio_sent"] <= tts.rest_at[0]
        assert rec.heard_text == REPLY
        assert rec.work.wasted_audio_s == 0.0
    finally:
        await h.session.aclose()


async def test_head_first_off_synthesizes_every_chunk_whole() -> None:
    cfg = base_config()
    h, tts = harness(dataclasses.replace(cfg, tts=dataclasses.replace(cfg.tts, head_first=False)))
    try:
        await h.driver.speak(0.5)
        await h.driver.quiet_until(lambda: h.completed(1))
        assert tts.calls and {kind for kind, _ in tts.calls} == {"whole"}
        assert h.record(1).heard_text == REPLY
    finally:
        await h.session.aclose()


async def test_an_interruption_while_the_head_plays_keeps_only_the_words_heard() -> None:
    """The first clause counts as its head plus the rest it announced: the history keeps
    what was played of it, not the whole clause, though its rest never came."""
    h, tts = harness(base_config())
    h.fakes.llm.reply = "The capital of France is Paris. It is a lovely city to visit."
    first = first_chunk(h.fakes.llm.reply, h.cfg)
    assert len(first.split()) >= 3, first
    tts.rest_gate.clear()  # the rest is still being decoded when the user interrupts
    head = tts.samples_for(first) // 4
    try:
        await h.driver.speak(0.5)
        await h.driver.quiet_until(lambda: h.transport.played_samples(1) >= head, max_s=5.0)
        assert h.transport.played_samples(1) == head  # all of the head, nothing after it
        h.session.interrupt()
        tts.rest_gate.set()
        await h.driver.quiet_until(lambda: h.completed(1))
        rec = h.record(1)
        assert rec.interrupted
        heard = rec.heard_text.split()
        # a quarter of the clause's audio: its first word or so, not all of it
        assert heard == first.split()[: len(heard)] and 0 < len(heard) < len(first.split()), rec.heard_text
    finally:
        tts.rest_gate.set()
        await h.session.aclose()
