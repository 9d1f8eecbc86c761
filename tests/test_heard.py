"""Played samples -> the words the listener heard (pure)."""

from __future__ import annotations

import pytest

from voice_pipeline.conversation.heard import SpokenClause, heard_text

TWO = [SpokenClause("Hello there.", 1200), SpokenClause("How are you today?", 1800)]

CASES: list[tuple[list[SpokenClause], int, str]] = [
    # nothing played
    (TWO, 0, ""),
    (TWO, -5, ""),
    ([], 1000, ""),
    # whole clauses
    (TWO, 1200, "Hello there."),
    (TWO, 3000, "Hello there. How are you today?"),
    (TWO, 99_999, "Hello there. How are you today?"),  # more than everything: all of it
    # partial clause, rounded down to whole words:
    # 600/1200 of "Hello there." = 6 chars -> "Hello" (ends at 5) fits, "there." does not
    (TWO, 600, "Hello"),
    (TWO, 499, ""),  # 4 chars: not even "Hello"
    (TWO, 500, "Hello"),  # 5 chars: "Hello" ends exactly there
    (TWO, 1199, "Hello"),  # one sample short of the clause: its last word is not heard
    # 900/1800 of "How are you today?" (18 chars) = 9 chars -> "How are" (ends at 7)
    (TWO, 1200 + 900, "Hello there. How are"),
    (TWO, 1200 + 1, "Hello there."),
    # proportional mapping in characters, not words
    ([SpokenClause("a bb ccccccc", 1200)], 400, "a bb"),  # 4 chars
    ([SpokenClause("a bb ccccccc", 1200)], 300, "a"),  # 3 chars
    ([SpokenClause("a bb ccccccc", 1200)], 1100, "a bb"),  # 11 chars: "ccccccc" ends at 12
    # repeated words are located in order
    ([SpokenClause("no no no no", 1100)], 700, "no no"),  # 7 chars: "no no" ends at 5, next at 8
    # irregular spacing is collapsed
    ([SpokenClause("one   two", 900)], 900, "one two"),
    ([SpokenClause("one   two", 900)], 500, "one"),
    # a clause with no audio is heard once playback reaches it
    ([SpokenClause("silent", 0), SpokenClause("loud words", 100)], 50, "silent loud"),
    # playback stops in the first clause: nothing from later clauses
    ([SpokenClause("first part", 100), SpokenClause("second", 100)], 99, "first"),
]


@pytest.mark.parametrize(("clauses", "played", "expected"), CASES)
def test_heard_text(clauses: list[SpokenClause], played: int, expected: str) -> None:
    assert heard_text(clauses, played) == expected


@pytest.mark.parametrize("played", range(0, 3001, 50))
def test_heard_text_is_a_growing_prefix(played: int) -> None:
    full = "Hello there. How are you today?".split()
    words = heard_text(TWO, played).split()
    assert words == full[: len(words)]
    assert len(words) <= len(heard_text(TWO, played + 50).split())
