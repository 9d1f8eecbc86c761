"""When the user's turn ends, and when that end is taken back (pure; the ``turn.*`` settings).

The end is proposed by the :class:`~vad.endpointer.Endpointer` (silence after speech)
and decided by the semantic policy of :mod:`vad.end_of_turn`, which
:func:`end_of_turn_policy` builds from the config. No policy is sure: a speaker may
go on after the end. :class:`Continuation` decides when their speech **continues**
the turn that ended (the reply is dropped, both parts are one utterance) rather than
starting a new one: while its reply is not audible yet, or within
``turn.continuation_grace_ms`` of its first audio (the user had not heard it) -- but
never speech that starts more than ``turn.continuation_max_gap_ms`` after the user's
own end of speech. It also decides when a turn can no longer be continued (the
machine then seals it).

Nor does a reply start over a speaker who has just gone on: while a voiced run that began
after the end may still become speech that continues the turn (the VAD has not heard
``vad.min_speech_ms`` of it yet), :meth:`Continuation.holds` keeps the reply's first audio
back -- for at most :data:`FIRST_AUDIO_HOLD_MAX_MS` of that run, or twice ``vad.min_speech_ms``
(a hum hovering between the VAD's thresholds holds nothing longer; nor does a voice after which
the input stops: :meth:`Continuation.hold_until` is when the runtime asks again). Without it, a reply
ready 0-150 ms after the speaker went on started over them and was flushed only when their
speech was confirmed.

Not continued, on purpose: a turn ended by ``vad.max_turn_s`` and a push-to-talk
turn (see :mod:`voice_pipeline.turntaking.phases`).

A speaker whose turn was continued is one who pauses after phrases that read and sound
finished ("I need eggs ... and some bread"): no policy can tell such a pause from an
end, so the reply risks being heard over them again at their next pause.
:class:`Patience` makes the session wait longer for them: the short and medium waits
grow by ``turn.patience_ms`` after a continuation, stay while the speaker goes on after
pauses that patience kept (longer than the medium wait), and shrink back by a quarter of
it with each turn without such a pause (a speaker who stopped pausing gets the short
wait back four turns later). Before any continuation, a speaker who hesitated in a turn (a
pause of :data:`HESITATION_MIN_MS` or more that did not end it, then more speech) gets, for
the rest of that turn only, a short wait that covers that pause (plus
:data:`HESITATION_MARGIN_MS`): "Can you tell me ... what the weather will be like ...
tomorrow morning?" is not answered at its second pause. Patience likewise covers the longest
pause a speaker went on after (held by it, or one that ended their turn and was continued).
Either stops short of ``turn.continuation_max_gap_ms`` (:data:`GAP_LEFT_MS` of it is left, so
the speaker can still go on after the end): a speaker who paused 1.3 s mid-sentence is not
answered at their next such pause.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from vad.end_of_turn import EndOfTurnPolicy, Rule
from voice_pipeline.config import TurnConfig, VADConfig
from voice_pipeline.turntaking.phases import Phase, TurnState


def end_of_turn_policy(vad: VADConfig, turn: TurnConfig, *, uses_model: bool) -> EndOfTurnPolicy | None:
    """The semantic end-of-turn policy the config asks for (None: ``turn.semantic`` off)."""
    if not turn.semantic:
        return None
    return EndOfTurnPolicy(
        vad.end_silence_ms,
        turn.unsure_silence_ms,
        turn.incomplete_silence_ms,
        turn.complete_threshold,
        uses_model=uses_model,
        verdict_silence_ms=turn.verdict_silence_ms,
        sound_silence_ms=turn.sound_silence_ms,
        statement_silence_ms=turn.statement_silence_ms,
    )


#: a voiced run holds a reply's first audio at most this long, or twice ``vad.min_speech_ms`` if
#: longer (by then it is speech, or gone, or a hum between the VAD's thresholds)
FIRST_AUDIO_HOLD_MAX_MS = 400


class Continuation:
    """The continuation rules of one session (``turn.continuation*``)."""

    def __init__(self, turn: TurnConfig, *, sample_rate_hz: int, time_of: Callable[[int], int]) -> None:
        """``time_of(sample)``: the monotonic time of an input sample."""
        self._enabled = turn.continuation
        self._rate = sample_rate_hz
        self._max_gap = turn.continuation_max_gap_ms * sample_rate_hz // 1000  # in samples
        self._grace_ns = turn.continuation_grace_ms * 1_000_000
        #: a turn heard as no words stays open this long after its speech (the gap, or the grace)
        self._no_words_ns = (turn.continuation_max_gap_ms or turn.continuation_grace_ms) * 1_000_000
        self._time_of = time_of

    def continues(self, t: TurnState, onset: int) -> bool:
        """Speech with its onset at input sample ``onset`` continues ``t`` (its reply not
        heard yet, or only within the grace) -- unless it starts more than
        ``turn.continuation_max_gap_ms`` after the user's own end of speech: however slow
        the reply, that is a new turn."""
        if not self._enabled or t.sealed or t.ptt or t.ended_by is Rule.MAX_TURN:
            return False
        end = t.speech_end_sample
        if self._max_gap > 0 and end is not None and onset - end > self._max_gap:
            return False
        if t.phase is Phase.REPLYING:
            return True
        return t.audible_ns is not None and self._time_of(onset) - t.audible_ns <= self._grace_ns

    def gap_ms(self, t: TurnState, onset: int) -> int:
        """The silence (ms) from ``t``'s end of speech to speech with its onset at ``onset``."""
        end = t.speech_end_sample
        return 0 if end is None else max(0, onset - end) * 1000 // self._rate

    def holds(self, t: TurnState, now_ns: int, pending_onset: int | None, min_speech_ms: int) -> bool:
        """``t``'s first audio waits: nothing of its reply was sent yet (REPLYING) and a voiced
        run (its onset at input sample ``pending_onset``) that would continue ``t`` may still
        become speech (``vad.min_speech_ms`` of it) -- for at most :data:`FIRST_AUDIO_HOLD_MAX_MS`
        of it, or twice ``min_speech_ms``."""
        if t.phase is not Phase.REPLYING or pending_onset is None or not self.continues(t, pending_onset):
            return False
        until = self.hold_until(pending_onset, min_speech_ms)
        return until is not None and now_ns < until

    def hold_until(self, pending_onset: int | None, min_speech_ms: int) -> int | None:
        """When a hold for the voiced run with its onset at input sample ``pending_onset`` ends
        at the latest (the runtime asks again then, even if no input came since)."""
        if pending_onset is None:
            return None
        return self._time_of(pending_onset) + max(FIRST_AUDIO_HOLD_MAX_MS, 2 * min_speech_ms) * 1_000_000

    def expired(self, t: TurnState, now_ns: int, pending_onset: int | None) -> bool:
        """``t`` (not sealed yet) can no longer be continued: its reply has been audible
        for longer than the grace -- unless a voiced run that began within the grace
        (its onset at input sample ``pending_onset``) may still become speech: it decides.
        A turn heard as no words (it has no reply) expires ``turn.continuation_max_gap_ms`` after
        its end of speech, unless a voiced run began by then: speech that soon is decoded with it."""
        if t.no_words and not t.sealed and t.speech_end_sample is not None:
            if not self._enabled:
                return True
            last = self._time_of(t.speech_end_sample) + self._no_words_ns  # the last onset that continues it
            return now_ns > last and (pending_onset is None or self._time_of(pending_onset) > last)
        if t.sealed or t.audible_ns is None or now_ns - t.audible_ns <= self._grace_ns:
            return False
        return pending_onset is None or self._time_of(pending_onset) - t.audible_ns > self._grace_ns


#: the ends of turn that patience answers: the policy's (not push-to-talk, a commit, the cap)
PATIENT_RULES = frozenset({Rule.COMPLETE, Rule.UNSURE, Rule.NO_VERDICT, Rule.INCOMPLETE})


#: a pause this long that did not end the turn is a hesitation: people's are 0.5-1.2 s, which
#: the VAD measures short: 30-60 ms on espeak's silent pauses, over 100 ms on a person's (a pause
#: made 0.5 s longer in a recording measured 384 ms: "And Mr. ... John", tests/data/human)
HESITATION_MIN_MS = 320
#: a hesitation's patience covers the pause it saw and this much more: the same speaker's next
#: pause may be longer (that recording's two pauses, each made 1.2 s longer: 1120 and 1152 ms);
#: so does the session's patience, for the longest pause the speaker went on after
HESITATION_MARGIN_MS = 200
#: the longest wait patience gives ends this long before ``turn.continuation_max_gap_ms``: a turn
#: ended past the gap could not be continued by a speaker who goes on at once
GAP_LEFT_MS = 100


class Patience:
    """How much longer than the policy's waits this session waits (``turn.patience_ms``)."""

    def __init__(self, patience_ms: int, *, used_from_ms: int, max_gap_ms: int = 0) -> None:
        """``used_from_ms``: a pause this long that the speaker broke was one patience kept
        (the medium wait: beyond it only unfinished words hold a turn without patience);
        ``max_gap_ms``: ``turn.continuation_max_gap_ms`` (0: no cap but the long wait)."""
        self._full = patience_ms
        self._used_from_ms = used_from_ms
        self._cap_ms = max_gap_ms - GAP_LEFT_MS if max_gap_ms > GAP_LEFT_MS else None
        self.extra_ms = 0
        self._kept = False  # continued, or patience was used: the next turn waits in full
        #: the longest pause the speaker broke in this turn when it was not patience's (ms)
        self._hesitated_ms = 0
        #: the longest pause the speaker went on after while patience was kept (ms)
        self._went_on_ms = 0

    @classmethod
    def of(cls, turn: TurnConfig) -> Patience:
        """The patience ``turn.*`` asks for."""
        return cls(
            turn.patience_ms, used_from_ms=turn.unsure_silence_ms, max_gap_ms=turn.continuation_max_gap_ms
        )

    def continued(self, ended_by: Rule | None, pause_ms: int = 0) -> None:
        """A turn ended by ``ended_by`` was continued after ``pause_ms`` of silence (from the
        user's end of speech to their onset): the speaker had not finished."""
        if ended_by in PATIENT_RULES and self._full:
            self.extra_ms, self._kept = max(self.extra_ms, self._full), True
            self._went_on_ms = max(self._went_on_ms, pause_ms)

    def resumed(self, silence_ms: int) -> None:
        """The speaker broke a pause of ``silence_ms`` in their turn: if patience held the
        turn through it, it is still needed (in full, and for the next turn too). Without
        patience, a pause of :data:`HESITATION_MIN_MS` or more (held by the words or the
        sound, or by evidence still on its way) is a hesitation: for the rest of this turn
        the waits cover a pause that long (:meth:`policy`), so a speaker who hesitated once in
        a sentence is not answered at the next such pause, after a phrase that reads finished."""
        if self.extra_ms:
            if silence_ms >= self._used_from_ms:
                self.extra_ms, self._kept = max(self.extra_ms, self._full), True
                self._went_on_ms = max(self._went_on_ms, silence_ms)
        elif silence_ms >= HESITATION_MIN_MS:
            self._hesitated_ms = max(self._hesitated_ms, silence_ms)

    def new_turn(self) -> None:
        """A new user turn began: it waits in full after a turn that was continued or used
        patience, and a quarter less after each one that did not."""
        self._hesitated_ms = 0  # a hesitation is this turn's only
        if self._kept:
            self._kept = False
        else:
            self.extra_ms, self._went_on_ms = max(0, self.extra_ms - self._full // 4), 0

    def policy(self, base: EndOfTurnPolicy | None) -> EndOfTurnPolicy | None:
        """``base`` with the waits this session needs now: the patience, or the short wait
        raised to the longest pause the speaker went on after (and :data:`HESITATION_MARGIN_MS`)
        -- a hesitation in this turn, or any while patience is kept -- if greater, at most
        :data:`GAP_LEFT_MS` short of the continuation gap."""
        if base is None:
            return None
        extra, longest = self.extra_ms, max(self._hesitated_ms, self._went_on_ms)
        if longest and self._full:
            cap = base.incomplete_silence_ms if self._cap_ms is None else self._cap_ms
            extra = max(extra, min(cap, longest + HESITATION_MARGIN_MS) - base.short_silence_ms)
        return base if base.patience_ms == extra else dataclasses.replace(base, patience_ms=extra)
