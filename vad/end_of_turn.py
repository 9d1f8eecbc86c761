"""Semantic end of turn (pure): has the user finished, from what they said and how?

Silence alone cannot tell a finished question from a speaker who pauses mid-sentence:
people pause 0.5-1.2 s inside sentences all the time ("I'd like to book a table
for ... four people"). Two more pieces of evidence arrive during the pause:

* the **words**, from the speculative transcript (:func:`transcript_cue`): an utterance
  that ends in an article, a conjunction, a filler ("um"), a preposition or a copula
  after a noun ("the thing is") is unfinished; a question mark is a finished question;
* the **sound**, from an audio turn-completion model (Smart Turn, :mod:`vad.smart_turn`):
  P(complete) of the utterance's last 8 s.

:class:`EndOfTurnPolicy` combines them with the silence into one of three waits (the
table :data:`WAITS`, one row per combination):

========================  ===============  ===============  ===============  ===============
words \\ sound            complete         incomplete       not back yet     no model
========================  ===============  ===============  ===============  ===============
complete ("...?")         short            medium (unsure)  medium (wait)    short
neutral                   statement        sound            verdict (wait)   statement
incomplete ("... for")    long             long             long             long
not back yet              long (wait)      long             long (wait)      long (wait)
========================  ===============  ===============  ===============  ===============

* *short* = ``vad.end_silence_ms`` (250 ms): a complete utterance ends as fast as with
  silence alone, so complete questions get no slower;
* *statement* = ``turn.statement_silence_ms``, unset by default: the short wait. A
  deployment whose users pause after phrases that read and sound finished (a list said item
  by item, "I need eggs ... milk ...") sets it longer than their pauses, and every statement
  waits it; neutral words never end a turn sooner (the verdict and sound waits are at least
  as long). What Whisper writes with a "?" or "!" is not a statement;
* *medium* = ``turn.unsure_silence_ms``: the evidence disagrees, or the words say a
  question and the sound is not back yet -- the turn ends there with what is known;
* *verdict* = ``turn.verdict_silence_ms``: neutral words, the model's verdict on its way;
  where the model runs after the words (or beside a slow decode) its verdict comes after
  the medium wait on a slow CPU, and ending there would take its say from it exactly on
  the statements it is for (a 2-core AVX2 EPYC: words ~300-450 ms, the model ~300 ms more);
* *sound* = ``turn.sound_silence_ms`` (1.5 s): only the sound says unfinished. Longer than
  people's mid-sentence pauses (0.5-1.2 s), shorter than the long wait: the model is wrong
  both ways, and a finished thing a person said that it hears as unfinished waits this long
  (2 of 5 in tests/data/human: "Feels like these days go on forever." P 0.005; session 25);
* *long* = ``turn.incomplete_silence_ms``: the utterance is unfinished; the turn
  still ends after that much silence (a speaker who trails off gets an answer). *Long
  (wait)*: the words are not back, and the turn waits for them up to the long wait, ending
  as soon as they come back and allow it. The reply cannot start before its words anyway
  (it is made from them), so ending sooner would gain nothing and would lose what they
  say: a short fragment the short window distrusts is decoded again in the full one (about
  0.4-0.5 s into the pause on AVX-512, 1.3-1.5 s on a Zen 1 EPYC), and ending at the medium
  wait before it came back answered a person's "And Mr. ..." (a 1.2 s pause,
  tests/data/human) without knowing it was a title waiting for its name.

The short and medium waits grow by ``patience_ms`` for a speaker who was seen to go on
after an end of turn (the session's :class:`voice_pipeline.turntaking.ending.Patience`).

Evidence can arrive after the short silence has passed; the endpointer re-evaluates at
once (:meth:`vad.endpointer.Endpointer.evidence`), so a late verdict costs only its
own lateness. The rule that ended a turn (:class:`Rule`) goes into its ledger record.

Limits, on purpose: the word lists are English; on synthetic voices the model is
unreliable both ways: fragments synthesized one by one end with a falling, final-sounding
contour and sound "complete" (espeak-ng, Piper; measured 2026-11), while many of espeak's
complete statements sound unfinished to it (P(complete) 0.01-0.37 at their real end, which
then waits the sound wait, the long one before session 25; docs/measurements.md session 20), so on such speech
only the words are reliable; a pause after a grammatically complete clause ("The thing
is, I don't really know ... what to cook") is left to the sound and, failing that, to
continuation (:mod:`voice_pipeline.turntaking.ending`). People's read speech is no kinder:
on the recordings in tests/data/human the model called "And Mr.", "Unless to be rather" and
"Eight of spades" (a list, each card said as if it were the last) finished, P 0.71-0.96
(session 23). The words hold the first two (a title; a degree adverb after a copula); a
first pause after a phrase that reads finished too ("Eight of spades") is often answered,
until the speaker goes on (docs/measurements.md session 24).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Cue(enum.StrEnum):
    """What the words say about the end of the utterance."""

    COMPLETE = "complete"  # a question mark or exclamation: a finished sentence
    NEUTRAL = "neutral"  # nothing either way (most statements)
    INCOMPLETE = "incomplete"  # ends where a sentence cannot end


class Rule(enum.StrEnum):
    """Why a user turn ended (the ledger records it; ``/metrics`` counts it)."""

    SILENCE = "silence"  # the semantic policy is off: vad.end_silence_ms of silence
    COMPLETE = "complete"  # it sounded and read finished: the short silence
    UNSURE = "unsure"  # words and sound disagreed: the medium silence
    NO_VERDICT = "no_verdict"  # the evidence was not back by its wait (medium, verdict or long)
    INCOMPLETE = "incomplete"  # unfinished, but the longest silence passed: ended anyway
    MAX_TURN = "max_turn"  # vad.max_turn_s of one turn: babble or a TV cannot hold it open
    PUSH_TO_TALK = "push_to_talk"  # the key was released
    COMMIT = "commit"  # the client committed the input (manual turn detection)


class Wait(enum.Enum):
    SHORT = enum.auto()
    STATEMENT = enum.auto()  # neutral words that sound finished: the short wait, or longer if set
    MEDIUM = enum.auto()
    LONG = enum.auto()
    VERDICT = enum.auto()  # the medium wait, or longer for a verdict on its way
    SOUND = enum.auto()  # only the sound says unfinished: between the medium and the long wait


class Sound(enum.Enum):
    """The audio model's verdict, as the table reads it."""

    COMPLETE = enum.auto()
    INCOMPLETE = enum.auto()
    PENDING = enum.auto()  # asked, not back yet
    OFF = enum.auto()  # no model configured (or it failed)


class Words(enum.Enum):
    COMPLETE = enum.auto()
    NEUTRAL = enum.auto()
    INCOMPLETE = enum.auto()
    PENDING = enum.auto()  # the speculative transcript is not back yet


#: the waits after neutral words
NEUTRAL_WAITS = frozenset({Wait.STATEMENT, Wait.VERDICT, Wait.SOUND})

_W, _S = Words, Sound
#: (words, sound) -> the silence to wait and the rule that ends the turn after it
WAITS: dict[tuple[Words, Sound], tuple[Wait, Rule]] = {
    (_W.COMPLETE, _S.COMPLETE): (Wait.SHORT, Rule.COMPLETE),
    (_W.COMPLETE, _S.INCOMPLETE): (Wait.MEDIUM, Rule.UNSURE),
    (_W.COMPLETE, _S.PENDING): (Wait.MEDIUM, Rule.NO_VERDICT),
    (_W.COMPLETE, _S.OFF): (Wait.SHORT, Rule.COMPLETE),
    (_W.NEUTRAL, _S.COMPLETE): (Wait.STATEMENT, Rule.COMPLETE),
    (_W.NEUTRAL, _S.INCOMPLETE): (Wait.SOUND, Rule.INCOMPLETE),
    (_W.NEUTRAL, _S.PENDING): (Wait.VERDICT, Rule.NO_VERDICT),
    (_W.NEUTRAL, _S.OFF): (Wait.STATEMENT, Rule.COMPLETE),
    (_W.INCOMPLETE, _S.COMPLETE): (Wait.LONG, Rule.INCOMPLETE),
    (_W.INCOMPLETE, _S.INCOMPLETE): (Wait.LONG, Rule.INCOMPLETE),
    (_W.INCOMPLETE, _S.PENDING): (Wait.LONG, Rule.INCOMPLETE),
    (_W.INCOMPLETE, _S.OFF): (Wait.LONG, Rule.INCOMPLETE),
    (_W.PENDING, _S.COMPLETE): (Wait.LONG, Rule.NO_VERDICT),
    (_W.PENDING, _S.INCOMPLETE): (Wait.LONG, Rule.INCOMPLETE),
    (_W.PENDING, _S.PENDING): (Wait.LONG, Rule.NO_VERDICT),
    (_W.PENDING, _S.OFF): (Wait.LONG, Rule.NO_VERDICT),
}


@dataclass(frozen=True, slots=True)
class Evidence:
    """What is known about the current pause. None = not back yet."""

    cue: Cue | None = None
    p_complete: float | None = None
    #: False when the turn model failed on this pause (the sound column is then "no model")
    sound: bool = True


@dataclass(frozen=True, slots=True)
class EndOfTurnPolicy:
    """How long a pause must last before the turn ends, given the evidence."""

    short_silence_ms: int
    unsure_silence_ms: int
    incomplete_silence_ms: int
    #: P(complete) at or above which the sound says "complete"
    complete_threshold: float = 0.5
    #: an audio turn model runs at every pause (else the sound column is "no model")
    uses_model: bool = True
    #: added to the short and medium waits (up to the long one): this speaker was seen to
    #: go on after an end of turn (:class:`voice_pipeline.turntaking.ending.Patience`)
    patience_ms: int = 0
    #: the wait for the model's verdict after neutral words (None: the medium wait)
    verdict_silence_ms: int | None = None
    #: the wait when only the sound says unfinished (None: the long wait)
    sound_silence_ms: int | None = None
    #: the wait after neutral words that sound finished (None: the short wait); no wait after
    #: neutral words is shorter
    statement_silence_ms: int | None = None

    def wait(self, evidence: Evidence) -> tuple[int, Rule]:
        """The silence (ms) after which the turn ends, and the rule that ends it."""
        ms, _patience, rule = self.waits(evidence)
        return ms, rule

    def waits(self, evidence: Evidence) -> tuple[int, int, Rule]:
        """:meth:`wait`, with how much of that silence is the speaker's patience (ms)."""
        sound = self._sound(evidence.p_complete) if evidence.sound else Sound.OFF
        kind, rule = WAITS[(self._words(evidence.cue), sound)]
        if kind is Wait.LONG:
            return self.incomplete_silence_ms, 0, rule
        ms = self.short_silence_ms if kind in (Wait.SHORT, Wait.STATEMENT) else self.unsure_silence_ms
        if kind is Wait.VERDICT:  # never shorter than the medium wait (nor past the long one)
            ms = max(ms, self.verdict_silence_ms or 0)
        elif kind is Wait.SOUND:  # likewise
            ms = max(
                ms, self.incomplete_silence_ms if self.sound_silence_ms is None else self.sound_silence_ms
            )
        longest = self.incomplete_silence_ms
        # no end after neutral words comes before a statement's: a floor, which patience may pass
        floor = min(self.statement_silence_ms or 0, longest) if kind in NEUTRAL_WAITS else 0
        patient, unpatient = min(ms + self.patience_ms, longest), max(min(ms, longest), floor)
        return max(patient, floor), max(patient - unpatient, 0), rule

    @staticmethod
    def model_start(configured: str, for_this_cpu: str | None, room: bool) -> str:
        """When the audio turn model runs in a pause: ``words`` (once the speculative words
        are in), ``early`` (at the pause, beside the decode; its verdict used as with
        ``words``) or ``pause`` (at the pause, its verdict used at once). ``auto`` takes the
        choice made for this CPU (``for_this_cpu``, ``words`` if none); a start before the
        words needs ``room`` (no other session's speculation fills the machine, no other
        decode is on the ASR engine and no LLM request runs: a model beside them slows them)."""
        start = (for_this_cpu or "words") if configured == "auto" else configured
        return start if start == "words" or room else "words"

    def _sound(self, p: float | None) -> Sound:
        if not self.uses_model:
            return Sound.OFF
        if p is None:
            return Sound.PENDING
        return Sound.COMPLETE if p >= self.complete_threshold else Sound.INCOMPLETE

    @staticmethod
    def _words(cue: Cue | None) -> Words:
        if cue is None:
            return Words.PENDING
        return {Cue.COMPLETE: Words.COMPLETE, Cue.NEUTRAL: Words.NEUTRAL, Cue.INCOMPLETE: Words.INCOMPLETE}[
            cue
        ]


# ---------------------------------------------------------------- the words

#: a sentence never ends on these, whatever its punctuation
NEVER_FINAL = frozenset(
    {
        # articles and determiners that need a noun
        "a", "an", "the", "my", "your", "his", "her", "our", "their", "its", "every", "each",
        "some", "any", "another", "several", "these", "those",
        # coordinating and subordinating conjunctions
        "and", "but", "or", "nor", "so", "because", "if", "unless", "although", "though",
        "whereas", "whether", "cause", "'cause",
        # fillers: the speaker is holding the floor
        "um", "uh", "uhm", "umm", "er", "erm", "hmm", "mm", "ah", "eh",
        # titles, said before a name ("And Mr. ... John Dashwood")
        "mr", "mrs", "ms", "mx", "messrs", "dr",
    }
)  # fmt: skip

#: prepositions and the infinitive marker: unfinished, unless the sentence is a question
#: ("Where are you from?" strands its preposition)
RARELY_FINAL = frozenset(
    {
        "of", "for", "to", "at", "with", "from", "into", "onto", "about", "by", "like",
        "than", "between", "through", "towards", "toward", "without", "during", "until",
        "via", "per", "among", "across", "against", "upon", "within",
    }
)  # fmt: skip

#: copulas and auxiliaries that end a sentence only after a pronoun or a wh-clause
#: ("what it is", "here you are"); after a noun they announce more ("the thing is ...")
COPULAS = frozenset({"is", "are", "was", "were", "am", "be", "been", "being"})
PRONOUNS = frozenset(
    {"i", "you", "he", "she", "it", "we", "they", "that", "this", "there", "who", "what", "which", "one"}
)

#: verbs of giving and telling: ending a question on one and its recipient ("Can you tell
#: me?") leaves out the thing given, which a speaker who pauses there is about to say (the
#: paused sentences of benchmarks/bench_turn_taking.py: "Can you tell me ... what the weather
#: will be like"). Such a question is unfinished, whatever the question mark and the sound
#: say (en-gb's "Can you tell me?" sounded finished, P 0.66; session 26). Not a question with
#: a wh-word ("What did you tell me?", "Where did you send us?"): its missing thing is the
#: wh-word itself.
GIVING_VERBS = frozenset(
    {"tell", "show", "teach", "remind", "give", "bring", "send", "hand", "lend", "pass", "buy", "get", "find"}
)
RECIPIENTS = frozenset({"me", "us"})
#: ... or a request that opens like one, its question mark not heard ("Can you tell me.")
REQUEST_OPENERS = frozenset({"can", "could", "would", "will", "can't", "won't", "couldn't", "wouldn't"})
WH_WORDS = frozenset({"what", "where", "when", "why", "who", "whom", "whose", "which", "how"})

#: adverbs of degree: after a copula they announce the adjective they grade ("to be
#: rather ... cold hearted", "it's very ..."); alone they answer ("Very.", "Quite.")
DEGREE = frozenset(
    {
        "very", "rather", "quite", "fairly", "really", "extremely", "somewhat", "incredibly",
        "terribly", "awfully",
    }
)  # fmt: skip

_TOKEN = re.compile(r"[a-z0-9']+")
_TRAILING_OFF = re.compile("(\\.\\.\\.|\u2026|,|;|:|-|\u2014|\u2013)\\s*$")  # ... , ; : - and dashes


def transcript_cue(text: str) -> Cue:
    """What the end of ``text`` (a speculative transcript) says about the utterance.

    INCOMPLETE when it trails off ("...", a comma, a dash), ends in a word of
    :data:`NEVER_FINAL`, ends in a word of :data:`RARELY_FINAL` without a question mark,
    ends in a copula right after a noun, or in an adverb of :data:`DEGREE` right after a
    copula ("it's very"), or is a question (or opens like one, :data:`REQUEST_OPENERS`) with
    no wh-word that ends on a verb of :data:`GIVING_VERBS` and its recipient ("Can you tell
    me?", not "Tell me!"); COMPLETE when it ends with "?" or "!"; NEUTRAL otherwise, and for
    no words at all (silence is the VAD's business).
    """
    stripped = text.strip()
    words = _TOKEN.findall(stripped.lower().replace("\u2019", "'"))  # typographic apostrophe
    if not words:
        return Cue.NEUTRAL
    last = words[-1]
    question = stripped.endswith(("?", "!"))
    if _TRAILING_OFF.search(stripped) or last in NEVER_FINAL:
        return Cue.INCOMPLETE
    if last in RARELY_FINAL and not question:
        return Cue.INCOMPLETE
    if last in COPULAS and not question and len(words) >= 2 and words[-2] not in PRONOUNS:
        return Cue.INCOMPLETE
    if last in DEGREE and not question and len(words) >= 2 and _is_copula(words[-2]):
        return Cue.INCOMPLETE
    if len(words) >= 2 and last in RECIPIENTS and words[-2] in GIVING_VERBS:
        if (stripped.endswith("?") or words[0] in REQUEST_OPENERS) and WH_WORDS.isdisjoint(words):
            return Cue.INCOMPLETE
    return Cue.COMPLETE if question else Cue.NEUTRAL


def _is_copula(word: str) -> bool:
    """A copula, alone or contracted onto its subject ("it's", "you're", "I'm")."""
    return word in COPULAS or word.endswith(("'s", "'re", "'m"))
