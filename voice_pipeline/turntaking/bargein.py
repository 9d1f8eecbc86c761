"""Barge-in decisions (pure): when user speech interrupts the assistant, and whether
an interruption was real.

Two stages, so that stopping is fast and backchannels still do not stop the reply:

1. **Pause** -- :class:`BargeInTracker` counts the user's voiced time (echo
   already removed, see :mod:`voice_pipeline.turntaking.echo`) while the assistant is
   audible. At ``min_speech_ms`` it answers :class:`SpeechOverReply`: the runtime stops
   sending at once and flushes the listener's buffer (the ``barge_in_stop``
   budget is measured to this moment), but keeps the reply's LLM and TTS work.
2. **Confirm or resume** -- the interruption is confirmed (:class:`ConfirmInterruption`:
   the reply's scope is cancelled, the vLLM request aborted) as soon as the user
   has spoken ``confirm_speech_ms`` (no backchannel is that long), or when the
   user's utterance is transcribed and :func:`classify_interruption` finds real
   words. If it finds nothing, only backchannels ("uh-huh", "okay") or the
   assistant's own words (echo the energy gate missed), the interruption was
   false: the paused reply resumes where playback stopped.

Words that cut a reply only to ask it to stop ("Stop!", "Okay, never mind.": :func:`asks_to_stop`)
are not answered (:func:`answers`): the reply stopped, and the assistant says no more.

Speech the echo probe finds to be the assistant's own voice interrupts nothing
(:meth:`BargeInTracker.hear`). An explicit interrupt (push-to-talk pressed while the
assistant speaks) skips both stages and confirms at once.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from voice_pipeline.config import BargeInConfig, VADConfig

#: a silent gap longer than this ends a run of user speech during the reply
GAP_MS = 200.0


@dataclass(frozen=True, slots=True)
class SpeechOverReply:
    """Speech over the reply long enough to pause it (the machine answers with its own
    :class:`~voice_pipeline.turntaking.messages.PauseReply` command)."""

    onset_ns: int  # when the interrupting speech began
    #: frames of it before this one: the turn it begins starts that many frames back
    frames_before: int = 0


@dataclass(frozen=True, slots=True)
class ConfirmInterruption:
    onset_ns: int


BargeInAction = SpeechOverReply | ConfirmInterruption


@dataclass(frozen=True, slots=True)
class EchoOverReply:
    """The speech long enough to confirm an interruption was the assistant's own voice
    (a long window tells echo apart reliably): a false interruption."""

    onset_ns: int


#: is the user's speech since ``onset_ns`` (up to 1 s of it) the assistant's own voice?
EchoProbe = Callable[[int], bool]


class BargeInTracker:
    """Counts voiced user time while the assistant is audible (one per session)."""

    def __init__(self, cfg: BargeInConfig, frame_ms: float) -> None:
        self._cfg = cfg
        self._frame_ms = frame_ms
        self.reset()

    @property
    def counting(self) -> bool:
        """A run of user speech over the reply has begun (callers may then count frames
        above the VAD's lower, hysteresis threshold as voiced, as the endpointer does)."""
        return self._onset_ns is not None

    def reset(self) -> None:
        self._voiced_ms = 0.0
        self._gap_ms = 0.0
        self._onset_ns: int | None = None
        self._frames = 0  # since the onset
        self._paused = False
        self._confirmed = False

    def frame(self, *, voiced: bool, assistant_audible: bool, frame_start_ns: int) -> BargeInAction | None:
        """One VAD frame. ``voiced`` must already exclude echo."""
        if not self._cfg.enabled or not assistant_audible:  # a paused reply counts as audible
            self.reset()
            return None
        if voiced:
            if self._onset_ns is None:
                self._onset_ns = frame_start_ns
            self._voiced_ms += self._frame_ms
            self._gap_ms = 0.0
        elif self._onset_ns is not None:
            self._gap_ms += self._frame_ms
            if self._gap_ms > GAP_MS and not self._paused:
                self.reset()
                return None
        if self._onset_ns is None:
            return None
        self._frames += 1
        if not self._paused and self._voiced_ms >= self._cfg.min_speech_ms:
            self._paused = True
            return SpeechOverReply(self._onset_ns, self._frames - 1)
        if self._paused and not self._confirmed and self._voiced_ms >= self._cfg.confirm_speech_ms:
            self._confirmed = True
            return ConfirmInterruption(self._onset_ns)
        return None

    def hear(
        self, p: float, vad: VADConfig, is_echo: EchoProbe, *, assistant_audible: bool, frame_start_ns: int
    ) -> BargeInAction | EchoOverReply | None:
        """One VAD frame of speech probability ``p`` (the per-frame echo already removed):
        voiced above ``vad.threshold``, or above ``vad.neg_threshold`` once a run has begun;
        what it would pause or confirm is first put to the echo probe. Echo that slipped
        through the per-frame gate pauses nothing; echo found at confirmation is
        :class:`EchoOverReply`."""
        threshold = vad.neg_threshold if self.counting else vad.threshold
        action = self.frame(
            voiced=p >= threshold, assistant_audible=assistant_audible, frame_start_ns=frame_start_ns
        )
        if action is None or not is_echo(action.onset_ns):
            return action
        if isinstance(action, SpeechOverReply):
            self.resolved()
            return None
        return EchoOverReply(action.onset_ns)

    def resolved(self) -> None:
        """The interruption was confirmed or resumed elsewhere: start counting afresh."""
        self.reset()


class InterruptionKind(enum.StrEnum):
    WORDS = "words"  # a real interruption
    NO_WORDS = "no_words"  # noise, a cough
    BACKCHANNEL = "backchannel"  # "uh-huh", "okay"
    ECHO = "echo"  # the assistant's own words came back


_WORD = re.compile(r"[a-z0-9']+")


def words_of(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("-", " "))


#: words said around a stop phrase that leave it a stop ("okay, stop", "no, never mind, please")
# fmt: off
STOP_SOFTENERS = (
    "okay", "ok", "oh", "no", "please", "just", "wait", "hey", "um", "uh", "alright", "all right",
    "sorry", "now",
)
# fmt: on
_SENTENCE_END = re.compile(r"[.?!]+")


def _covered(words: list[str], *lists: Iterable[str]) -> tuple[bool, set[int]]:
    """Are ``words`` made only of the phrases in ``lists`` (longest first)? And which of the
    lists (their indexes) the phrases came from."""
    phrases = sorted(
        ((tuple(words_of(p)), n) for n, phrases in enumerate(lists) for p in phrases),
        key=lambda pn: len(pn[0]),
        reverse=True,
    )
    used: set[int] = set()
    i = 0
    while i < len(words):
        for phrase, n in phrases:
            if phrase and tuple(words[i : i + len(phrase)]) == phrase:
                i += len(phrase)
                used.add(n)
                break
        else:
            return False, used
    return True, used


def asks_to_stop(text: str, stop_phrases: Iterable[str]) -> bool:
    """The last sentence of ``text`` asks the assistant only to stop: it is made of
    ``stop_phrases`` (at least one) and :data:`STOP_SOFTENERS` ("Stop!", "Okay, never mind.",
    or "What is the capital of France? Stop."). "How do I make it stop?" does not, nor does
    "Stop, what time is it?"."""
    sentences = [s for s in _SENTENCE_END.split(text) if words_of(s)]
    if not sentences:
        return False
    covered, used = _covered(words_of(sentences[-1]), stop_phrases, STOP_SOFTENERS)
    return covered and 0 in used


class StopWindow:
    """When words that only ask to stop, though they cut no reply, were still meant for one:
    they start within ``barge_in.stop_after_reply_ms`` of a reply heard to its end, or after a
    stop that was not answered, with no reply heard to its end since ("Stop. ... Stop!": the
    second is for the same reply, however long the user waited to say it)."""

    def __init__(self) -> None:
        self._since_ns, self._stopped = -(2**62), False  # nothing heard or stopped yet

    def heard(self, at_ns: int) -> None:
        """A reply was heard to its end at ``at_ns``."""
        self._since_ns, self._stopped = at_ns, False

    def stopped(self) -> None:
        """The user's words asked only to stop, and were not answered."""
        self._stopped = True

    def covers(self, onset_ns: int | None, window_ms: int) -> bool:
        """Was speech that began at ``onset_ns`` said in the window?"""
        return onset_ns is not None and (self._stopped or onset_ns - self._since_ns <= window_ms * 1_000_000)


def answers(
    text: str, kind: InterruptionKind | None, *, cut_reply: bool, stop_phrases: Iterable[str]
) -> bool:
    """Are a turn's final words answered? Words meant for the assistant (spoken over no reply,
    or a real interruption) -- unless they cut a reply (``cut_reply``: spoken over it, or they
    continued its turn) only to ask it to stop ("Stop!", "Never mind."): it stopped; no more."""
    if not text or kind not in (None, InterruptionKind.WORDS):
        return False
    return not (cut_reply and asks_to_stop(text, stop_phrases))


def classify_interruption(
    text: str, backchannels: Iterable[str], assistant_recent: str, *, echo_overlap: float = 0.8
) -> InterruptionKind:
    """What the user said while the assistant was speaking."""
    words = words_of(text)
    if not words:
        return InterruptionKind.NO_WORDS
    if _covered(words, backchannels)[0]:
        return InterruptionKind.BACKCHANNEL
    spoken = set(words_of(assistant_recent))
    if sum(w in spoken for w in words) / len(words) >= echo_overlap:
        return InterruptionKind.ECHO
    return InterruptionKind.WORDS
