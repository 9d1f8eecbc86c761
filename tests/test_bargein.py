"""Barge-in decisions: the voiced-time tracker, the interruption classifier and a stop (pure, tables)."""

from __future__ import annotations

import pytest

from voice_pipeline.config import DEFAULT_BACKCHANNELS, BargeInConfig
from voice_pipeline.turntaking.bargein import (
    GAP_MS,
    BargeInAction,
    BargeInTracker,
    ConfirmInterruption,
    InterruptionKind,
    SpeechOverReply,
    StopWindow,
    answers,
    asks_to_stop,
    classify_interruption,
    words_of,
)

MS = 1_000_000
T0 = 7_000 * MS
# the tables below are written for these thresholds (not the defaults, which may be tuned)
CFG = BargeInConfig(min_speech_ms=200, confirm_speech_ms=800)  # pause at 200 ms voiced, confirm at 800

# ---------------------------------------------------------------- tracker

#: frames as letters: "v" voiced, "." silent, "x" voiced while the assistant is not audible,
#: "_" silent while not audible. Expected actions by frame index ("P" pause, "C" confirm,
#: with the index of the frame whose start is the onset).
Script = tuple[float, str, dict[int, tuple[str, int]]]

V10 = "v" * 10  # 200 ms at 20 ms frames
SCRIPTS: dict[str, Script] = {
    "pause exactly at min_speech_ms": (20, V10, {9: ("P", 0)}),
    "one frame short of min_speech_ms: nothing": (20, "v" * 9 + "." * 20, {}),
    "onset is the first voiced frame": (20, "...." + V10, {13: ("P", 4)}),
    "32 ms frames: pause at the 7th voiced frame (224 ms)": (32, "v" * 7, {6: ("P", 0)}),
    "a gap of 200 ms is tolerated (the onset stays)": (20, "vvvvv" + "." * 10 + "vvvvv", {19: ("P", 0)}),
    "a gap over 200 ms starts afresh": (20, "vvvvv" + "." * 11 + V10, {25: ("P", 16)}),
    "silent frames do not count as speech": (20, "v.v.v.v.v.v.v.v.v.v", {18: ("P", 0)}),
    "confirm at confirm_speech_ms, once": (20, "v" * 60, {9: ("P", 0), 39: ("C", 0)}),
    # once paused, a silence does not reset the run: the transcript decides, or more speech
    "paused: a long gap keeps counting towards confirm": (
        20,
        V10 + "." * 50 + "v" * 30,
        {9: ("P", 0), 89: ("C", 0)},
    ),
    "not audible resets the count": (20, "vvvvvvvvv" + "x" + "vvvvvvvvv" + "v", {19: ("P", 10)}),
    "not audible while paused resets too": (20, V10 + "_" + V10, {9: ("P", 0), 20: ("P", 11)}),
    "speech while nothing is audible never pauses": (20, "x" * 100, {}),
}


def run(tracker: BargeInTracker, frame_ms: float, frames: str) -> dict[int, BargeInAction]:
    out: dict[int, BargeInAction] = {}
    for i, f in enumerate(frames):
        action = tracker.frame(
            voiced=f in "vx", assistant_audible=f in "v.", frame_start_ns=T0 + round(i * frame_ms * MS)
        )
        if action is not None:
            out[i] = action
    return out


def expected_actions(frame_ms: float, expected: dict[int, tuple[str, int]]) -> dict[int, BargeInAction]:
    """A pause at frame ``i`` of a run that began at frame ``onset`` had ``i - onset`` frames before it."""
    return {
        i: SpeechOverReply(T0 + round(onset * frame_ms * MS), i - onset)
        if k == "P"
        else ConfirmInterruption(T0 + round(onset * frame_ms * MS))
        for i, (k, onset) in expected.items()
    }


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_tracker(name: str) -> None:
    frame_ms, frames, expected = SCRIPTS[name]
    tracker = BargeInTracker(CFG, frame_ms)
    assert run(tracker, frame_ms, frames) == expected_actions(frame_ms, expected)


def test_gap_constant_matches_the_table() -> None:
    assert GAP_MS == 200.0


def test_disabled_never_acts() -> None:
    tracker = BargeInTracker(BargeInConfig(enabled=False), 20)
    assert run(tracker, 20, "v" * 100) == {}


def test_thresholds_come_from_the_config() -> None:
    cfg = BargeInConfig(min_speech_ms=100, confirm_speech_ms=300)
    assert run(BargeInTracker(cfg, 20), 20, "v" * 40) == expected_actions(20, {4: ("P", 0), 14: ("C", 0)})


def test_resolved_starts_counting_afresh() -> None:
    tracker = BargeInTracker(CFG, 20)
    assert run(tracker, 20, V10) == expected_actions(20, {9: ("P", 0)})
    tracker.resolved()  # the interruption was a backchannel: the reply resumed
    # a new interruption needs min_speech_ms again, and can be confirmed again
    got = run(tracker, 20, "v" * 40)
    assert got == expected_actions(20, {9: ("P", 0), 39: ("C", 0)})


def test_after_confirm_nothing_more_until_resolved() -> None:
    tracker = BargeInTracker(CFG, 20)
    assert len(run(tracker, 20, "v" * 40)) == 2
    assert run(tracker, 20, "v" * 100) == {}


# ---------------------------------------------------------------- classifier

SAID = "The capital of France is Paris, a city on the Seine with about two million people."

CLASSIFY: list[tuple[str, InterruptionKind]] = [
    ("", InterruptionKind.NO_WORDS),
    ("   ", InterruptionKind.NO_WORDS),
    ("...", InterruptionKind.NO_WORDS),
    ("uh-huh", InterruptionKind.BACKCHANNEL),
    ("Uh huh.", InterruptionKind.BACKCHANNEL),
    ("okay yeah", InterruptionKind.BACKCHANNEL),
    ("mm-hmm right", InterruptionKind.BACKCHANNEL),
    ("Mm-hmm. Right.", InterruptionKind.BACKCHANNEL),
    ("I see.", InterruptionKind.BACKCHANNEL),
    ("yeah, got it", InterruptionKind.BACKCHANNEL),
    ("stop", InterruptionKind.WORDS),
    ("wait what about Paris", InterruptionKind.WORDS),
    ("yeah but why", InterruptionKind.WORDS),  # a backchannel start does not make it one
    ("okay stop", InterruptionKind.WORDS),
    # the assistant's own words coming back (echo the energy gate missed)
    ("capital of France is Paris", InterruptionKind.ECHO),
    ("a city on the Seine", InterruptionKind.ECHO),
    # a real question sharing a few of the assistant's words
    ("what is the capital of Spain", InterruptionKind.WORDS),
    ("how many people live in Paris", InterruptionKind.WORDS),
    # a single word the assistant just said is taken for its echo (a fragment of it)
    ("Paris", InterruptionKind.ECHO),
    ("Madrid", InterruptionKind.WORDS),
]


@pytest.mark.parametrize(("text", "kind"), CLASSIFY)
def test_classify_interruption(text: str, kind: InterruptionKind) -> None:
    assert classify_interruption(text, DEFAULT_BACKCHANNELS, SAID) is kind


def test_echo_needs_the_assistant_to_have_said_it() -> None:
    assert classify_interruption("capital of France is Paris", DEFAULT_BACKCHANNELS, "") is (
        InterruptionKind.WORDS
    )


@pytest.mark.parametrize(("overlap", "kind"), [(0.8, InterruptionKind.WORDS), (0.6, InterruptionKind.ECHO)])
def test_echo_overlap_threshold(overlap: float, kind: InterruptionKind) -> None:
    # 4 of 6 words were said by the assistant (0.67)
    text = "what is the capital of Spain"
    assert classify_interruption(text, DEFAULT_BACKCHANNELS, SAID, echo_overlap=overlap) is kind


def test_backchannels_come_from_the_caller() -> None:
    assert classify_interruption("stop", ["stop"], SAID) is InterruptionKind.BACKCHANNEL
    assert classify_interruption("uh-huh", [], SAID) is InterruptionKind.WORDS


@pytest.mark.parametrize(
    ("text", "words"),
    [("Uh-huh, OK!", ["uh", "huh", "ok"]), ("It's 42.", ["it's", "42"]), ("", [])],
)
def test_words_of(text: str, words: list[str]) -> None:
    assert words_of(text) == words


def test_counting_starts_with_the_first_voiced_frame_and_ends_on_reset() -> None:
    tracker = BargeInTracker(BargeInConfig(), 32.0)
    assert not tracker.counting
    tracker.frame(voiced=False, assistant_audible=True, frame_start_ns=0)
    assert not tracker.counting
    tracker.frame(voiced=True, assistant_audible=True, frame_start_ns=32_000_000)
    assert tracker.counting
    tracker.resolved()
    assert not tracker.counting


STOPS = BargeInConfig().stop_phrases


@pytest.mark.parametrize(
    ("text", "stops"),
    [
        ("Stop!", True),
        ("Stop, never mind.", True),
        ("Okay, stop.", True),
        ("No, stop talking please", True),
        ("Please be quiet.", True),
        ("That's enough!", True),
        # Whisper's whole decode of a turn continued to say it: the last sentence decides
        ("What is the capital of friends? Stop!", True),
        ("What is the capital of friends? Stop Never Mind", True),
        # not only a stop
        ("How do I make it stop?", False),
        ("I want to stop.", False),
        ("Stop, what time is it?", False),
        ("Stop. What time is it?", False),
        ("Enough about dragons, tell me about cats.", False),
        # no stop phrase at all: a "no" is an answer
        ("No.", False),
        ("Okay.", False),
        ("", False),
        ("...", False),
    ],
)
def test_asks_to_stop(text: str, stops: bool) -> None:
    assert asks_to_stop(text, STOPS) is stops


def test_stop_phrases_come_from_the_caller() -> None:
    assert asks_to_stop("Halt!", ["halt"])
    assert not asks_to_stop("Stop!", [])


def test_stop_window() -> None:
    window, second = StopWindow(), 1_000_000_000
    assert not window.covers(0, 1500) and not window.covers(None, 1500)  # nothing heard yet
    window.heard(10 * second)  # a reply heard to its end: a stop said within 1.5 s is for it
    assert window.covers(11 * second, 1500) and not window.covers(12 * second, 1500)
    window.stopped()  # a stop that was not answered: the next one is for the same reply
    assert window.covers(100 * second, 1500) and not window.covers(None, 1500)
    window.heard(200 * second)  # ... until a reply is heard to its end
    assert not window.covers(202 * second, 1500)


@pytest.mark.parametrize(
    ("text", "kind", "cut", "answered"),
    [
        ("What time is it?", None, False, True),
        ("Stop!", None, False, True),  # no reply was cut: answered like any words
        ("Stop!", InterruptionKind.WORDS, True, False),
        ("Tell me more. Stop, what time is it?", InterruptionKind.WORDS, True, True),
        ("uh-huh", InterruptionKind.BACKCHANNEL, True, False),
        ("", None, False, False),
    ],
)
def test_answers(text: str, kind: InterruptionKind | None, cut: bool, answered: bool) -> None:
    assert answers(text, kind, cut_reply=cut, stop_phrases=STOPS) is answered
