"""The semantic end-of-turn policy and the transcript cue: tables, no event loop, no models."""

from __future__ import annotations

import dataclasses

import pytest

from vad.end_of_turn import WAITS, Cue, EndOfTurnPolicy, Evidence, Rule, Sound, Wait, Words, transcript_cue
from vad.endpointer import EndOfTurn, Endpointer, PauseStarted, SpeechStarted
from voice_pipeline.config import Config, VADConfig, validate
from voice_pipeline.errors import ConfigError
from voice_pipeline.turntaking.ending import end_of_turn_policy

# ---------------------------------------------------------------- the words

CUES = [
    # unfinished: an article, a conjunction, a filler, a preposition, a copula after a noun
    ("I'd like to book a table for", Cue.INCOMPLETE),
    ("I'd like to book a table for.", Cue.INCOMPLETE),  # Whisper puts a period on fragments
    ("I'd like to book a table for...", Cue.INCOMPLETE),
    ("Can I get the", Cue.INCOMPLETE),
    ("I want a", Cue.INCOMPLETE),
    ("I went to the shop and", Cue.INCOMPLETE),
    ("It was cheap but", Cue.INCOMPLETE),
    ("We could go there because", Cue.INCOMPLETE),
    ("So I was thinking, um", Cue.INCOMPLETE),
    ("So I was thinking um.", Cue.INCOMPLETE),
    ("Uh", Cue.INCOMPLETE),
    ("The thing is", Cue.INCOMPLETE),
    ("The problem is.", Cue.INCOMPLETE),
    ("What I want is", Cue.INCOMPLETE),
    ("I need eggs, milk,", Cue.INCOMPLETE),  # trails off on a comma
    ("I need eggs, milk, and", Cue.INCOMPLETE),
    ("I'm going to", Cue.INCOMPLETE),
    ("It depends on my", Cue.INCOMPLETE),
    ("I'd like", Cue.INCOMPLETE),
    ("Let me think -", Cue.INCOMPLETE),
    ("at seven \u2014", Cue.INCOMPLETE),  # an em dash
    ("And Mr.", Cue.INCOMPLETE),  # a title: the name follows (a person's pause, tests/data/human)
    ("I have an appointment with Dr.", Cue.INCOMPLETE),
    ("Unless to be rather.", Cue.INCOMPLETE),  # a degree adverb after a copula: the adjective follows
    ("It's very", Cue.INCOMPLETE),
    ("The soup was quite.", Cue.INCOMPLETE),
    ("You\u2019re really", Cue.INCOMPLETE),
    # finished questions
    ("What is the capital of France?", Cue.COMPLETE),
    ("Where are you from?", Cue.COMPLETE),  # a stranded preposition in a question
    ("What is it for?", Cue.COMPLETE),
    ("Can you help me!", Cue.COMPLETE),
    ("Will you marry me?", Cue.COMPLETE),
    ("Can you tell me a joke?", Cue.COMPLETE),  # the thing told is there
    ("Where did you send us?", Cue.COMPLETE),  # the wh-word is the thing asked for
    ("What can you tell me?", Cue.COMPLETE),
    # a question that stops on a verb of giving or telling and its recipient: the thing follows
    ("Can you tell me?", Cue.INCOMPLETE),
    ("Could you show us?", Cue.INCOMPLETE),
    ("Can you give me?", Cue.INCOMPLETE),
    ("Can you tell me.", Cue.INCOMPLETE),  # its question mark not heard: it opens as one
    ("Please tell me.", Cue.NEUTRAL),  # a request that is all there
    ("Tell us!", Cue.COMPLETE),
    # nothing either way
    ("Tell me a joke.", Cue.NEUTRAL),
    ("I don't really know", Cue.NEUTRAL),  # grammatically complete: the sound must tell
    ("I know what it is", Cue.NEUTRAL),  # a copula after a pronoun ends a clause
    ("Here you are.", Cue.NEUTRAL),
    ("four people at seven tonight", Cue.NEUTRAL),
    ("I\u2019m done", Cue.NEUTRAL),  # a typographic apostrophe
    ("", Cue.NEUTRAL),
    ("   ", Cue.NEUTRAL),
    ("...", Cue.NEUTRAL),  # no words at all: the VAD's business
    ("The answer is 42.", Cue.NEUTRAL),
    ("Very.", Cue.NEUTRAL),  # a degree adverb alone answers ("How hot is it?")
    ("Not quite.", Cue.NEUTRAL),
    ("I'd rather.", Cue.NEUTRAL),
    ("I like it, really.", Cue.NEUTRAL),
    ("Is it really?", Cue.COMPLETE),
    ("Thank you, Mrs. Smith.", Cue.NEUTRAL),
]


@pytest.mark.parametrize(("text", "cue"), CUES, ids=[t or "(empty)" for t, _ in CUES])
def test_transcript_cue(text: str, cue: Cue) -> None:
    assert transcript_cue(text) is cue


# ---------------------------------------------------------------- the policy

POLICY = EndOfTurnPolicy(short_silence_ms=250, unsure_silence_ms=700, incomplete_silence_ms=2000)

POLICY_CASES = [
    # (evidence, expected wait ms, rule)
    (Evidence(Cue.NEUTRAL, 0.9), 250, Rule.COMPLETE),
    (Evidence(Cue.COMPLETE, 0.9), 250, Rule.COMPLETE),
    (Evidence(Cue.COMPLETE, 0.5), 250, Rule.COMPLETE),  # the threshold is inclusive
    (Evidence(Cue.NEUTRAL, 0.49), 2000, Rule.INCOMPLETE),
    (Evidence(Cue.COMPLETE, 0.1), 700, Rule.UNSURE),
    (Evidence(Cue.INCOMPLETE, 0.99), 2000, Rule.INCOMPLETE),  # synthetic voices sound finished
    (Evidence(Cue.INCOMPLETE, None), 2000, Rule.INCOMPLETE),  # the words alone hold it open
    (Evidence(None, 0.9), 2000, Rule.NO_VERDICT),  # the transcript is not back yet: waited for
    (Evidence(None, 0.1), 2000, Rule.INCOMPLETE),
    (Evidence(Cue.NEUTRAL, None), 700, Rule.NO_VERDICT),  # the model is not back yet
    (Evidence(None, None), 2000, Rule.NO_VERDICT),
    (Evidence(Cue.COMPLETE, None), 700, Rule.NO_VERDICT),  # a question, the model not back
    (Evidence(Cue.NEUTRAL, None, sound=False), 250, Rule.COMPLETE),  # the model failed
    (Evidence(Cue.INCOMPLETE, None, sound=False), 2000, Rule.INCOMPLETE),
]


@pytest.mark.parametrize(("evidence", "ms", "rule"), POLICY_CASES)
def test_policy_waits(evidence: Evidence, ms: int, rule: Rule) -> None:
    assert POLICY.wait(evidence) == (ms, rule)


def test_without_a_model_the_sound_never_holds_the_turn() -> None:
    policy = EndOfTurnPolicy(250, 700, 2000, uses_model=False)
    assert policy.wait(Evidence(Cue.NEUTRAL, None)) == (250, Rule.COMPLETE)
    assert policy.wait(Evidence(Cue.NEUTRAL, 0.01)) == (250, Rule.COMPLETE)  # a stray value is ignored
    assert policy.wait(Evidence(Cue.INCOMPLETE, None)) == (2000, Rule.INCOMPLETE)
    assert policy.wait(Evidence(None, None)) == (2000, Rule.NO_VERDICT)  # the words on their way


def test_the_table_covers_every_combination() -> None:
    assert set(WAITS) == {(w, s) for w in Words for s in Sound}
    # only the incomplete words or sound ever make a turn wait the longest, or words not
    # back yet (waited for: the turn ends as soon as they come back and allow it)
    for (words, sound), (wait, rule) in WAITS.items():
        if wait is Wait.LONG:
            assert words is Words.INCOMPLETE or sound is Sound.INCOMPLETE or rule is Rule.NO_VERDICT
            assert rule is Rule.INCOMPLETE or words is Words.PENDING
        if words is Words.INCOMPLETE:
            assert wait is Wait.LONG
        if wait is Wait.SOUND:  # the sound alone: neither the words nor their absence hold it
            assert (words, sound, rule) == (Words.NEUTRAL, Sound.INCOMPLETE, Rule.INCOMPLETE)


def test_patience_lengthens_the_short_and_medium_waits_up_to_the_long_one() -> None:
    patient = dataclasses.replace(POLICY, patience_ms=1000)
    assert patient.wait(Evidence(Cue.NEUTRAL, 0.9)) == (1250, Rule.COMPLETE)
    assert patient.wait(Evidence(Cue.COMPLETE, None)) == (1700, Rule.NO_VERDICT)
    assert patient.wait(Evidence(Cue.INCOMPLETE, None)) == (2000, Rule.INCOMPLETE)  # as before
    very = dataclasses.replace(POLICY, patience_ms=1500)
    assert very.wait(Evidence(Cue.COMPLETE, 0.1)) == (2000, Rule.UNSURE)  # never past the long wait
    # how much of each wait is patience: what was added, not what was asked for
    assert patient.waits(Evidence(Cue.NEUTRAL, 0.9)) == (1250, 1000, Rule.COMPLETE)
    assert very.waits(Evidence(Cue.COMPLETE, 0.1)) == (2000, 1300, Rule.UNSURE)
    assert very.waits(Evidence(Cue.INCOMPLETE, None)) == (2000, 0, Rule.INCOMPLETE)


def test_neutral_words_wait_longer_for_a_verdict_on_its_way_and_nothing_else_does() -> None:
    policy = EndOfTurnPolicy(250, 500, 2000, verdict_silence_ms=900)
    # the verdict comes after the words on a slow CPU: the statement waits for it, not past 900 ms
    assert policy.wait(Evidence(Cue.NEUTRAL, None)) == (900, Rule.NO_VERDICT)
    assert policy.wait(Evidence(Cue.NEUTRAL, 0.9)) == (250, Rule.COMPLETE)  # back: as before
    assert policy.wait(Evidence(Cue.NEUTRAL, 0.1)) == (2000, Rule.INCOMPLETE)
    # a question mark, or a model that failed: the waits of before
    assert policy.wait(Evidence(Cue.COMPLETE, None)) == (500, Rule.NO_VERDICT)
    assert policy.wait(Evidence(Cue.NEUTRAL, None, sound=False)) == (250, Rule.COMPLETE)
    # never past the long wait, with patience too; unset, it is the medium wait
    assert dataclasses.replace(policy, patience_ms=1500).waits(Evidence(Cue.NEUTRAL, None)) == (
        2000, 1100, Rule.NO_VERDICT,
    )  # fmt: skip
    assert EndOfTurnPolicy(250, 500, 2000).wait(Evidence(Cue.NEUTRAL, None)) == (500, Rule.NO_VERDICT)


def test_the_sound_alone_holds_a_turn_for_the_sound_wait_not_the_long_one() -> None:
    policy = EndOfTurnPolicy(250, 500, 2000, sound_silence_ms=1500)
    # "Feels like these days go on forever." (a person, tests/data/human): P 0.005
    assert policy.wait(Evidence(Cue.NEUTRAL, 0.005)) == (1500, Rule.INCOMPLETE)
    # the words hold as before: unfinished, or not back yet (the turn waits for them)
    assert policy.wait(Evidence(Cue.INCOMPLETE, 0.005)) == (2000, Rule.INCOMPLETE)
    assert policy.wait(Evidence(Cue.INCOMPLETE, 0.9)) == (2000, Rule.INCOMPLETE)
    assert policy.wait(Evidence(None, 0.005)) == (2000, Rule.INCOMPLETE)
    assert policy.wait(Evidence(Cue.COMPLETE, 0.005)) == (500, Rule.UNSURE)
    # a speaker seen to go on gets patience on it too, up to the long wait
    assert dataclasses.replace(policy, patience_ms=300).waits(Evidence(Cue.NEUTRAL, 0.1)) == (
        1800, 300, Rule.INCOMPLETE,
    )  # fmt: skip
    assert dataclasses.replace(policy, patience_ms=1000).waits(Evidence(Cue.NEUTRAL, 0.1)) == (
        2000, 500, Rule.INCOMPLETE,
    )  # fmt: skip
    # kept between the medium and the long wait; unset, the long wait
    assert dataclasses.replace(policy, sound_silence_ms=100).wait(Evidence(Cue.NEUTRAL, 0.1))[0] == 500
    assert dataclasses.replace(policy, sound_silence_ms=5000).wait(Evidence(Cue.NEUTRAL, 0.1))[0] == 2000
    assert EndOfTurnPolicy(250, 500, 2000).wait(Evidence(Cue.NEUTRAL, 0.1)) == (2000, Rule.INCOMPLETE)
    # the config's turn.sound_silence_ms is the policy's
    cfg = Config()
    built = end_of_turn_policy(cfg.vad, dataclasses.replace(cfg.turn, sound_silence_ms=1234), uses_model=True)
    assert built is not None and built.wait(Evidence(Cue.NEUTRAL, 0.1)) == (1234, Rule.INCOMPLETE)


def test_complete_utterances_are_no_slower_than_silence_alone() -> None:
    # unless a deployment sets turn.statement_silence_ms, which only neutral words wait
    for words in (Words.COMPLETE, Words.NEUTRAL):
        assert WAITS[(words, Sound.COMPLETE)][0] in (Wait.SHORT, Wait.STATEMENT)
        assert WAITS[(words, Sound.OFF)][0] in (Wait.SHORT, Wait.STATEMENT)
    for cue in (Cue.COMPLETE, Cue.NEUTRAL):
        assert POLICY.wait(Evidence(cue, 0.9)) == (250, Rule.COMPLETE)
        assert POLICY.wait(Evidence(cue, None, sound=False)) == (250, Rule.COMPLETE)
    assert Config().turn.statement_silence_ms is None


def test_a_statement_waits_the_statement_wait_and_a_question_does_not() -> None:
    policy = EndOfTurnPolicy(250, 500, 2000, verdict_silence_ms=900, sound_silence_ms=1500)
    stated = dataclasses.replace(policy, statement_silence_ms=1400)
    # "I need eggs" (espeak en-gb, P 0.95) and "Eight of spades" (a person, P 0.96): then a pause
    assert policy.wait(Evidence(Cue.NEUTRAL, 0.95)) == (250, Rule.COMPLETE)
    assert stated.wait(Evidence(Cue.NEUTRAL, 0.95)) == (1400, Rule.COMPLETE)
    assert stated.wait(Evidence(Cue.NEUTRAL, None, sound=False)) == (1400, Rule.COMPLETE)  # no model
    assert dataclasses.replace(stated, uses_model=False).wait(Evidence(Cue.NEUTRAL, None)) == (
        1400,
        Rule.COMPLETE,
    )
    # a question keeps the short wait, and the other rows their own
    assert stated.wait(Evidence(Cue.COMPLETE, 0.95)) == (250, Rule.COMPLETE)
    assert stated.wait(Evidence(Cue.COMPLETE, 0.1)) == (500, Rule.UNSURE)
    assert stated.wait(Evidence(Cue.INCOMPLETE, 0.95)) == (2000, Rule.INCOMPLETE)
    assert stated.wait(Evidence(None, 0.95)) == (2000, Rule.NO_VERDICT)
    assert stated.wait(Evidence(Cue.NEUTRAL, 0.1)) == (1500, Rule.INCOMPLETE)  # the sound wait, longer
    # no end after neutral words comes sooner than a statement's: a verdict on its way, the sound
    assert stated.wait(Evidence(Cue.NEUTRAL, None)) == (1400, Rule.NO_VERDICT)
    longer = dataclasses.replace(policy, statement_silence_ms=1800)
    assert longer.wait(Evidence(Cue.NEUTRAL, 0.1)) == (1800, Rule.INCOMPLETE)
    # patience raises the short wait, not this one: it is the longer of the two (up to the long wait)
    assert dataclasses.replace(stated, patience_ms=1000).waits(Evidence(Cue.NEUTRAL, 0.95)) == (
        1400, 0, Rule.COMPLETE,
    )  # fmt: skip
    assert dataclasses.replace(stated, patience_ms=1500).waits(Evidence(Cue.NEUTRAL, 0.95)) == (
        1750, 350, Rule.COMPLETE,
    )  # fmt: skip
    assert dataclasses.replace(stated, patience_ms=1000).waits(Evidence(Cue.NEUTRAL, None)) == (
        1900, 500, Rule.NO_VERDICT,
    )  # fmt: skip
    # the config's turn.statement_silence_ms is the policy's, between the short and the long wait
    cfg = Config()
    built = end_of_turn_policy(
        cfg.vad, dataclasses.replace(cfg.turn, statement_silence_ms=1234), uses_model=True
    )
    assert built is not None and built.wait(Evidence(Cue.NEUTRAL, 0.95)) == (1234, Rule.COMPLETE)
    for bad in (0, 100, 2500):  # 0 is not "unset" (None is)
        with pytest.raises(ConfigError, match="statement_silence_ms"):
            validate(dataclasses.replace(cfg, turn=dataclasses.replace(cfg.turn, statement_silence_ms=bad)))


# ---------------------------------------------------------------- the endpointer with the policy

F = 320  # 20 ms frames at 16 kHz
CFG = VADConfig(min_speech_ms=40, end_silence_ms=100, pre_roll_ms=0, max_turn_s=0.0)
P = EndOfTurnPolicy(short_silence_ms=100, unsure_silence_ms=200, incomplete_silence_ms=400)


def feed(ep: Endpointer, pattern: str) -> list[tuple[int, object]]:
    out: list[tuple[int, object]] = []
    for i, ch in enumerate(pattern):
        out += [(i, a) for a in ep.update(0.9 if ch == "#" else 0.0)]
    return out


def test_an_unfinished_sentence_holds_the_turn_until_the_long_wait() -> None:
    ep = Endpointer(CFG, 16000, F, P)
    assert feed(ep, "##.") == [(1, SpeechStarted(0, 0, 2 * F)), (2, PauseStarted(2 * F))]
    assert ep.evidence(2 * F, cue=Cue.INCOMPLETE) == []
    assert ep.evidence(2 * F, p_complete=0.99) == []
    assert feed(ep, "." * 18) == []  # 19 silent frames = 380 ms
    ((_, end),) = feed(ep, ".")
    assert isinstance(end, EndOfTurn)
    assert (end.rule, end.wait_ms, end.decided_sample) == (Rule.INCOMPLETE, 400, 22 * F)
    assert end.evidence == Evidence(Cue.INCOMPLETE, 0.99)


def test_evidence_for_an_earlier_pause_is_ignored() -> None:
    ep = Endpointer(CFG, 16000, F, P)
    feed(ep, "##..##.")  # paused after frame 1, resumed, paused again after frame 5
    assert ep.evidence(2 * F, cue=Cue.NEUTRAL, p_complete=0.9) == []  # the first pause's
    assert feed(ep, "....") == []  # its verdict did not carry over: still waiting
    (end,) = ep.evidence(6 * F, cue=Cue.NEUTRAL, p_complete=0.9)
    assert isinstance(end, EndOfTurn) and end.rule is Rule.COMPLETE


def test_evidence_outside_a_pause_is_ignored() -> None:
    ep = Endpointer(CFG, 16000, F, P)
    assert ep.evidence(0, cue=Cue.NEUTRAL) == []
    feed(ep, "###")
    assert ep.evidence(3 * F, cue=Cue.NEUTRAL) == []  # speaking, not pausing


def test_the_maximum_turn_length_ends_continuous_speech() -> None:
    ep = Endpointer(
        VADConfig(min_speech_ms=40, end_silence_ms=100, pre_roll_ms=0, max_turn_s=1.0), 16000, F, P
    )
    actions = feed(ep, "#" * 60)
    ends = [(i, a) for i, a in actions if isinstance(a, EndOfTurn)]
    assert len(ends) == 1
    i, end = ends[0]
    assert isinstance(end, EndOfTurn)
    assert (i, end.rule, end.decided_sample) == (49, Rule.MAX_TURN, 50 * F)  # 1 s after the onset
    assert any(isinstance(a, SpeechStarted) for j, a in actions if j > i)  # the babble starts a new turn


def test_the_maximum_applies_during_a_pause_too() -> None:
    ep = Endpointer(
        VADConfig(min_speech_ms=40, end_silence_ms=100, pre_roll_ms=0, max_turn_s=1.0), 16000, F, P
    )
    feed(ep, "#" * 45 + ".")
    ep.evidence(45 * F, cue=Cue.INCOMPLETE)
    ends = [a for _, a in feed(ep, "....") if isinstance(a, EndOfTurn)]
    assert [e.rule for e in ends] == [Rule.MAX_TURN]


def test_abandon_leaves_the_turn_without_an_action() -> None:
    ep = Endpointer(CFG, 16000, F, P)
    feed(ep, "###")
    ep.abandon()
    assert not ep.in_turn
    assert feed(ep, "......") == []


@pytest.mark.parametrize(
    ("configured", "for_this_cpu", "room", "expected"),
    [
        ("auto", "early", True, "early"),  # AVX2: at the pause, beside the decode
        ("auto", "words", True, "words"),  # AVX-512
        ("auto", None, True, "words"),  # nothing chosen: after the words
        ("pause", "words", True, "pause"),  # configured wins
        ("early", None, False, "words"),  # the machine is full: not before the words
        ("pause", None, False, "words"),
        ("words", "early", False, "words"),
    ],
)
def test_when_the_turn_model_runs(
    configured: str, for_this_cpu: str | None, room: bool, expected: str
) -> None:
    assert EndOfTurnPolicy.model_start(configured, for_this_cpu, room) == expected


def test_the_words_on_their_way_are_waited_for_up_to_the_long_wait() -> None:
    """A fragment the short window distrusts is decoded again in the full one, after the
    medium wait: the turn waits for its words (the reply is made from them anyway), then
    ends at once if they allow it, or holds on if they read unfinished ("And Mr.")."""
    policy = EndOfTurnPolicy(250, 500, 2000, verdict_silence_ms=900, patience_ms=300)
    for sound in (None, 0.9):
        assert policy.waits(Evidence(None, sound)) == (2000, 0, Rule.NO_VERDICT)
    assert policy.waits(Evidence(None, None, sound=False)) == (2000, 0, Rule.NO_VERDICT)
    assert policy.wait(Evidence(None, 0.1)) == (2000, Rule.INCOMPLETE)
    # back at last: the wait of what they say, already passed if they came late
    assert policy.wait(Evidence(Cue.COMPLETE, None, sound=False)) == (550, Rule.COMPLETE)
    assert policy.wait(Evidence(transcript_cue("And Mr."), 0.9)) == (2000, Rule.INCOMPLETE)
