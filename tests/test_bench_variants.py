"""The turn-taking variants the benchmarks compare (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from voice_pipeline.bench.variants import turn_variant
from voice_pipeline.config import Config


def test_noverdict_waits_no_longer_than_the_medium_wait() -> None:
    base = Config()
    cfg = turn_variant(base, "noverdict")
    assert cfg is not None
    assert cfg.turn.verdict_silence_ms == base.turn.unsure_silence_ms
    assert cfg.vad == base.vad


@pytest.mark.parametrize("wait", [100, 600, 3000])
def test_a_short_wait_raises_the_longer_waits_it_would_pass(wait: int) -> None:
    base = Config()
    cfg = turn_variant(base, f"wait{wait}")
    assert cfg is not None
    assert cfg.vad.end_silence_ms == wait
    assert cfg.turn.unsure_silence_ms == max(wait, base.turn.unsure_silence_ms)
    assert cfg.turn.verdict_silence_ms == max(wait, base.turn.verdict_silence_ms)
    assert cfg.turn.incomplete_silence_ms == max(wait, base.turn.incomplete_silence_ms)
    # everything else as the defaults
    assert cfg.turn.patience_ms == base.turn.patience_ms and cfg.llm == base.llm


def test_sound_sets_the_wait_on_the_sound_alone_and_nothing_else() -> None:
    base = Config()
    cfg = turn_variant(base, "sound2000")
    assert cfg is not None
    assert cfg.turn == dataclasses.replace(base.turn, sound_silence_ms=2000) and cfg.vad == base.vad


def test_grace_sets_the_continuation_grace_and_nothing_else() -> None:
    base = Config()
    cfg = turn_variant(base, "grace900")
    assert cfg is not None
    assert cfg.turn == dataclasses.replace(base.turn, continuation_grace_ms=900) and cfg.vad == base.vad


def test_statement_sets_the_statement_wait_and_nothing_else() -> None:
    base = Config()
    cfg = turn_variant(base, "statement1400")
    assert cfg is not None
    assert cfg.turn == dataclasses.replace(base.turn, statement_silence_ms=1400) and cfg.vad == base.vad
    with pytest.raises(ValueError, match=r"statement5000.*statement_silence_ms"):
        turn_variant(base, "statement5000")  # past the long wait


def test_other_modes_are_not_variants_and_bad_waits_say_why() -> None:
    assert turn_variant(Config(), "new") is None
    assert turn_variant(Config(), "wait") is None
    assert turn_variant(Config(), "grace") is None
    assert turn_variant(Config(), "statement") is None
    with pytest.raises(ValueError, match=r"wait10.*end_silence_ms"):
        turn_variant(Config(), "wait10")
