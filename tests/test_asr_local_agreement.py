"""LocalAgreement-2 commit policy: pure, table-driven, no event loop."""

from __future__ import annotations

import pytest

from asr.local_agreement import LocalAgreement, agreed_prefix, normalize_word, resume_index


def w(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# each case: successive hypotheses -> (newly committed, committed, tentative) after each
CASES: dict[str, list[tuple[str, str, str, str]]] = {
    "first hypothesis commits nothing": [
        ("what is", "", "", "what is"),
    ],
    "growing stable hypothesis commits the agreed prefix": [
        ("what is", "", "", "what is"),
        ("what is the capital", "what is", "what is", "the capital"),
        ("what is the capital of France?", "the capital", "what is the capital", "of France?"),
    ],
    "disagreement stops the commit": [
        ("what is the", "", "", "what is the"),
        ("what was the capital", "what", "what", "was the capital"),
        ("what was the capital of", "was the capital", "what was the capital", "of"),
    ],
    "case and punctuation are folded": [
        ("What is the capital", "", "", "What is the capital"),
        ("what is the capital, of", "what is the capital,", "what is the capital,", "of"),
    ],
    "committed words keep the spelling they were committed with": [
        ("Paris.", "", "", "Paris."),
        ("paris is", "paris", "paris", "is"),
        ("Paris. Is it", "Is", "paris Is", "it"),
    ],
    "committed words never change when a re-decode rewrites them": [
        ("the quick brown", "", "", "the quick brown"),
        ("the quick brown fox", "the quick brown", "the quick brown", "fox"),
        ("a quick round fox jumps", "fox", "the quick brown fox", "jumps"),
        ("the quick brown fox jumps over", "jumps", "the quick brown fox jumps", "over"),
    ],
    "a split committed word is aligned on the last committed word": [
        ("the round-fark jumps", "", "", "the round-fark jumps"),
        ("the round-fark jumps over", "the round-fark jumps", "the round-fark jumps", "over"),
        ("the round fark jumps over the", "over", "the round-fark jumps over", "the"),
    ],
    "shorter hypothesis leaves nothing tentative": [
        ("one two three", "", "", "one two three"),
        ("one two three four", "one two three", "one two three", "four"),
        ("one two", "", "one two three", ""),
    ],
    "empty hypotheses": [
        ("", "", "", ""),
        ("", "", "", ""),
        ("hello", "", "", "hello"),
        ("hello there", "hello", "hello", "there"),
    ],
}


@pytest.mark.parametrize("steps", list(CASES.values()), ids=list(CASES))
def test_local_agreement(steps: list[tuple[str, str, str, str]]) -> None:
    la = LocalAgreement()
    for hypothesis, new, committed, tentative in steps:
        assert la.update(w(hypothesis)) == w(new), hypothesis
        assert la.committed == w(committed), hypothesis
        assert la.tentative == w(tentative), hypothesis


def test_committed_is_append_only() -> None:
    hypotheses = [
        "so",
        "so I",
        "so I think we",
        "so I think we should",
        "so I think he should go",
        "so I think he should go home",
        "so I think we should go home now",
        "so I thing",
    ]
    la = LocalAgreement()
    history: tuple[str, ...] = ()
    for h in hypotheses:
        la.update(w(h))
        assert la.committed[: len(history)] == history
        history = la.committed
    assert history == w("so I think we should go home")


def test_reset_starts_a_new_utterance() -> None:
    la = LocalAgreement()
    la.update(w("one two"))
    la.update(w("one two three"))
    assert la.committed == w("one two")
    la.reset()
    assert la.committed == () and la.tentative == ()
    assert la.update(w("four five")) == ()
    assert la.update(w("four five")) == w("four five")


@pytest.mark.parametrize(
    ("word", "normalized"),
    [("France?", "france"), ("Don't", "don't"), ("round-fark", "roundfark"), ("...", ""), ("42,", "42")],
)
def test_normalize_word(word: str, normalized: str) -> None:
    assert normalize_word(word) == normalized


@pytest.mark.parametrize(
    ("hypothesis", "committed", "index"),
    [
        ("a b c", "", 0),
        ("a b c", "a b", 2),
        ("A, b. c", "a b", 2),
        ("a x y b c", "a b", 4),  # last committed word found 2 later
        ("ab c", "a b", 2),  # merged, last word not found: positional
        ("a", "a b c", 1),  # shorter than committed: clipped
        ("x b c", "a b", 2),  # first word rewritten, same count
    ],
)
def test_resume_index(hypothesis: str, committed: str, index: int) -> None:
    assert resume_index(w(hypothesis), w(committed)) == index


@pytest.mark.parametrize(
    ("a", "b", "n"),
    [("", "", 0), ("a b", "a b c", 2), ("A b?", "a B", 2), ("a b", "x b", 0)],
)
def test_agreed_prefix(a: str, b: str, n: int) -> None:
    assert agreed_prefix(w(a), w(b)) == n
