"""What goes into the turn state machine and what comes out of it (typed, frozen).

Inputs the runtime reports asynchronously are events (:class:`EvidenceFound`); how a
session takes turns beyond its config is :class:`TurnOptions` (a realtime client's
``session.update``); the machine's answers are commands, imperative, one class each,
dispatched with ``match`` (:data:`Command`). The machine itself is
:mod:`voice_pipeline.turntaking.machine`; its phases and transition table are in
:mod:`voice_pipeline.turntaking.phases`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from vad.end_of_turn import Cue
from vad.endpointer import EndOfTurn
from voice_pipeline.turntaking.bargein import InterruptionKind

# ---------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class EvidenceFound:
    """What the words (``cue``) or the sound (``p_complete``; ``no_sound``: the model failed,
    or was not asked because the words already decide) of the pause after
    ``speech_end_sample`` of turn ``turn_id`` say."""

    turn_id: int
    speech_end_sample: int
    cue: Cue | None = None
    p_complete: float | None = None
    no_sound: bool = False


class Detection(enum.StrEnum):
    """Who starts and ends the user's turns."""

    #: the VAD and the end-of-turn policy (``vad.*``, ``turn.*``)
    VAD = "vad"
    #: the client: a turn starts with the first input after a commit (or a clear, or the
    #: session's start) and ends with the next commit; the VAD decides nothing, and nothing
    #: interrupts a reply but an explicit cancel (a realtime session's ``turn_detection: null``)
    MANUAL = "manual"


@dataclass(frozen=True, slots=True)
class TurnOptions:
    detection: Detection = Detection.VAD
    #: a turn that ends is answered at once; False: its transcript stands unanswered
    #: (:class:`Keep`) until the client asks for a reply (``create_response: false``)
    auto_reply: bool = True

    def verdict(self, turn_id: int, interruption: InterruptionKind | None) -> Answer | Keep:
        """A final transcript that stands: answered at once, or kept (``auto_reply`` off)."""
        return Answer(turn_id, interruption) if self.auto_reply else Keep(turn_id, interruption)


class CancelReason(enum.StrEnum):
    """Why a reply was cancelled (the text of the ``ReplyInterrupted`` event)."""

    UNHEARD = "user speech before the reply was heard"  # continuation off, or not allowed
    LONG_SPEECH = "barge-in: long speech"
    WORDS = "barge-in"
    EXPLICIT = "explicit interrupt"
    SUPERSEDED = "superseded"  # barge-in off: the next turn replaces the reply
    STOPPED_BY_NO_WORDS = "stopped by no_words"  # resume_after_false_interruption off
    STOPPED_BY_BACKCHANNEL = "stopped by backchannel"
    STOPPED_BY_ECHO = "stopped by echo"
    CLIENT = "cancelled by the client"  # a realtime client's response.cancel

    @property
    def false_interruption(self) -> bool:
        """The reply was stopped by something that was not an interruption after all (no
        words, a backchannel, its own echo) and not resumed."""
        return self in _STOPPED_BY.values()

    @staticmethod
    def stopped_by(kind: InterruptionKind) -> CancelReason:
        """Why a reply paused by a false interruption of this ``kind`` (not ``WORDS``) is
        cancelled rather than resumed (``barge_in.resume_after_false_interruption`` off)."""
        return _STOPPED_BY[kind]


_STOPPED_BY = {
    InterruptionKind.NO_WORDS: CancelReason.STOPPED_BY_NO_WORDS,
    InterruptionKind.BACKCHANNEL: CancelReason.STOPPED_BY_BACKCHANNEL,
    InterruptionKind.ECHO: CancelReason.STOPPED_BY_ECHO,
}


# ---------------------------------------------------------------- commands


@dataclass(frozen=True, slots=True)
class BeginTurn:
    """A new user turn: transcribe from ``start_sample`` (the onset minus the pre-roll)."""

    turn_id: int
    onset_sample: int
    start_sample: int
    #: the reply this utterance is spoken over (a possible barge-in)
    spoken_over: int | None


@dataclass(frozen=True, slots=True)
class BeginReply:
    """A turn with no user speech: a reply asked for directly (it starts REPLYING)."""

    turn_id: int


@dataclass(frozen=True, slots=True)
class DropTurn:
    """The user's turn in progress is abandoned (the client cleared its input): no
    transcript, no reply, no record."""

    turn_id: int


@dataclass(frozen=True, slots=True)
class ContinueTurn:
    """The user went on: drop the turn's reply (abort its request, flush its audio) and
    keep transcribing the same utterance, which has buffered everything since."""

    turn_id: int
    onset_sample: int


@dataclass(frozen=True, slots=True)
class Speculate:
    """A pause began: start the final ASR decode and the turn model on the audio so far."""

    turn_id: int
    speech_end_sample: int


@dataclass(frozen=True, slots=True)
class StopSpeculating:
    """Speech resumed: the speculation (and any LLM prefetch) is void."""

    turn_id: int


@dataclass(frozen=True, slots=True)
class Prefetch:
    """Start the LLM on the speculative transcript while the pause runs."""

    turn_id: int


@dataclass(frozen=True, slots=True)
class EndTurn:
    turn_id: int
    end: EndOfTurn


@dataclass(frozen=True, slots=True)
class StartReply:
    turn_id: int


@dataclass(frozen=True, slots=True)
class PauseReply:
    """Stop sending the reply and flush the listener now (barge-in stage 1)."""

    turn_id: int
    onset_ns: int


@dataclass(frozen=True, slots=True)
class HoldReply:
    """Hold the reply's first audio back (``held``: a voice began that may be the user going
    on, or an earlier reply is still to be heard), or let it go (it was not, or it was and the
    reply is dropped; the earlier reply ended). ``until_ns``: when a voice's hold ends at the
    latest; the runtime then calls :meth:`TurnMachine.tick`, as input may have stopped (no
    frame would end it). An earlier reply's end lets the next go (:meth:`TurnMachine.reply_finished`)."""

    turn_id: int
    held: bool
    until_ns: int | None = None


@dataclass(frozen=True, slots=True)
class ResumeReply:
    """The interruption was false: the reply goes on from where playback stopped."""

    turn_id: int
    kind: InterruptionKind


@dataclass(frozen=True, slots=True)
class CancelReply:
    turn_id: int
    reason: CancelReason
    #: a confirmed barge-in (the ledger marks ``barge_in_confirmed``)
    barge_in: bool = False


@dataclass(frozen=True, slots=True)
class Seal:
    """The turn can no longer be continued: stop buffering input for it."""

    turn_id: int


@dataclass(frozen=True, slots=True)
class Answer:
    """The final transcript stands: ask the LLM (``interruption``: what the utterance was,
    if it was spoken over a reply)."""

    turn_id: int
    interruption: InterruptionKind | None


@dataclass(frozen=True, slots=True)
class Dismiss:
    """Nothing to answer: no words, or a backchannel, noise or echo over a reply."""

    turn_id: int
    interruption: InterruptionKind | None


@dataclass(frozen=True, slots=True)
class Keep:
    """The final transcript stands but is not answered (auto replies are off): it waits
    in the conversation for a reply the client asks for."""

    turn_id: int
    interruption: InterruptionKind | None


Command = (
    BeginTurn
    | BeginReply
    | DropTurn
    | ContinueTurn
    | Speculate
    | StopSpeculating
    | Prefetch
    | EndTurn
    | StartReply
    | PauseReply
    | HoldReply
    | ResumeReply
    | CancelReply
    | Seal
    | Answer
    | Keep
    | Dismiss
)

#: the machine's verdict on a turn's final transcript
Verdict = Answer | Keep | Dismiss


@dataclass(frozen=True, slots=True)
class Transcribed:
    """What :meth:`TurnMachine.transcribed` makes of a final transcript: the commands to
    carry out (the verdict among them) and the verdict itself (None: the turn was no
    longer waiting for its words)."""

    commands: tuple[Command, ...]
    verdict: Verdict | None
