"""The phases of a turn and every transition between them (pure data), and the table of live
turns (:class:`TurnTable`: what the session may ask of them).

:class:`~voice_pipeline.turntaking.machine.TurnMachine` moves each turn through this table
(:meth:`TurnState.move`) and nothing else; a transition that is not here is a bug
(:class:`TurnStateError`).

Phases of one turn (:class:`Phase`) and every transition (:data:`TRANSITIONS`)::

                                        respond ──┐
    LISTENING ──pause──> MAYBE_FINISHED ──end──> REPLYING ──audible──> AUDIBLE ──barge──> PAUSED
     │ ^  ^──resume────────┘  │   LISTENING ──end──┘  │  │                 │ │  ^──resume───┘ │
     │ │                      │                       │  │                 │ │                │
     │ └──────────────────continue────────────────────┘  └──cancel/finish──┴─┴───────┬────────┘
     │        (speech before the reply was audible, or within the grace after it)     v
     └──drop──┴──> DONE (the client cleared its input)         INTERRUPTED ──finish──> DONE

* LISTENING: the user is speaking; MAYBE_FINISHED: they paused and the end-of-turn
  policy is deciding (the speculative ASR decode and the turn model run now).
* REPLYING: the turn ended and its reply is being prepared -- nothing is audible
  yet. User speech now **continues** the same turn
  (:class:`~voice_pipeline.turntaking.messages.ContinueTurn`): the reply is dropped, the vLLM
  request aborted, and both parts are transcribed as one utterance. So does speech
  that starts within ``turn.continuation_grace_ms`` of the reply becoming AUDIBLE:
  the user had not heard it yet.
* AUDIBLE: later speech over the reply is a barge-in: a new user turn spoken over
  it; the tracker PAUSES the reply at once, then the interruption is confirmed
  (cancel: INTERRUPTED) or found false (a backchannel, noise or echo: AUDIBLE again).
* DONE: the reply finished, was cancelled, failed, or there was nothing to answer.

A turn starts LISTENING when the user speaks, or REPLYING when a client asks for a
reply with no speech (``TurnMachine.respond``: a realtime ``response.create``). With
:class:`~voice_pipeline.turntaking.messages.TurnOptions` ``detection`` MANUAL a turn starts at
the first frame after a commit or clear and ends at the next commit (the VAD decides
nothing, speech interrupts nothing); with ``auto_reply`` off a turn's words are kept
(:class:`~voice_pipeline.turntaking.messages.Keep`) and not answered until the client asks.

At most one turn is LISTENING or MAYBE_FINISHED (the user's); an older one may be
AUDIBLE or PAUSED under it (the reply spoken over) and one REPLYING.

Not continued, on purpose: a turn ended by ``vad.max_turn_s`` (babble or a TV would
otherwise hold it forever) and a push-to-talk turn (a new key press is a new turn).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from vad.end_of_turn import Rule
from voice_pipeline.errors import LocalProtocolError


class Phase(enum.StrEnum):
    LISTENING = "listening"
    MAYBE_FINISHED = "maybe_finished"
    REPLYING = "replying"
    AUDIBLE = "audible"
    PAUSED = "paused"
    INTERRUPTED = "interrupted"
    DONE = "done"


class Step(enum.StrEnum):
    PAUSE = "pause"  # the user fell silent
    RESUME = "resume"  # ... and went on before the turn ended
    END = "end"  # the turn ended: its reply starts
    CONTINUE = "continue"  # the user went on after the end: same turn, reply dropped
    AUDIBLE = "audible"  # the reply's first audio went to the listener
    BARGE = "barge"  # user speech over the reply paused it
    RESUME_REPLY = "resume_reply"  # that speech was not an interruption after all
    CANCEL = "cancel"  # the reply was cancelled
    FINISH = "finish"  # nothing more happens in this turn
    DROP = "drop"  # the client cleared the input: the user's turn is abandoned


_P, _S = Phase, Step
#: (phase, step) -> phase: every transition a turn can take. Anything else is a bug.
TRANSITIONS: dict[tuple[Phase, Step], Phase] = {
    (_P.LISTENING, _S.PAUSE): _P.MAYBE_FINISHED,
    (_P.LISTENING, _S.END): _P.REPLYING,  # push-to-talk released, a commit, or the maximum length
    (_P.LISTENING, _S.DROP): _P.DONE,
    (_P.MAYBE_FINISHED, _S.RESUME): _P.LISTENING,
    (_P.MAYBE_FINISHED, _S.END): _P.REPLYING,
    (_P.MAYBE_FINISHED, _S.DROP): _P.DONE,
    (_P.REPLYING, _S.CONTINUE): _P.LISTENING,
    (_P.REPLYING, _S.AUDIBLE): _P.AUDIBLE,
    (_P.REPLYING, _S.CANCEL): _P.INTERRUPTED,
    (_P.REPLYING, _S.FINISH): _P.DONE,
    (_P.AUDIBLE, _S.CONTINUE): _P.LISTENING,
    (_P.AUDIBLE, _S.BARGE): _P.PAUSED,
    (_P.AUDIBLE, _S.CANCEL): _P.INTERRUPTED,
    (_P.AUDIBLE, _S.FINISH): _P.DONE,
    (_P.PAUSED, _S.CONTINUE): _P.LISTENING,
    (_P.PAUSED, _S.RESUME_REPLY): _P.AUDIBLE,
    (_P.PAUSED, _S.CANCEL): _P.INTERRUPTED,
    (_P.PAUSED, _S.FINISH): _P.DONE,
    (_P.INTERRUPTED, _S.FINISH): _P.DONE,
}

#: phases with a reply in progress
REPLY_PHASES = frozenset({Phase.REPLYING, Phase.AUDIBLE, Phase.PAUSED})
#: phases in which the listener hears the reply (a paused one counts: it may resume)
HEARD_PHASES = frozenset({Phase.AUDIBLE, Phase.PAUSED})


class TurnStateError(LocalProtocolError):
    """A transition not in :data:`TRANSITIONS` was attempted: a bug, not bad input."""


@dataclass(slots=True)
class TurnState:
    """What the machine knows of one live turn."""

    turn_id: int
    phase: Phase = Phase.LISTENING
    spoken_over: int | None = None
    ended_by: Rule | None = None
    audible_ns: int | None = None
    #: the input sample at which the user's speech of this turn ended (when it ended)
    speech_end_sample: int | None = None
    ptt: bool = False
    sealed: bool = False
    #: its reply's first audio is held back: a voice may continue the turn (Continuation.holds),
    #: or an earlier reply is still to be heard (TurnTable._queued)
    held: bool = False
    #: its words are being answered (an Answer verdict): its reply is to be heard
    answered: bool = False
    #: its final words were none (Whisper heard silence): open while its speaker may go on
    no_words: bool = False
    #: the user went on after it ended (ContinueTurn): their words cut its reply (it was dropped;
    #: a turn heard as no words had none, but a stop said then is still left unanswered)
    continued: bool = False
    #: when its speech began (monotonic ns; None for a reply with no user speech): a stop said
    #: soon after a reply ended may be meant for it (bargein.StopWindow)
    onset_ns: int | None = None
    #: a reply asked for, waiting for the floor behind this heard reply when speech began over
    #: that one: it shares its fate (cut with it; heard after it if the speech was no interruption)
    behind: int | None = None

    def move(self, step: Step) -> None:
        """Take ``step``: the only way a turn changes phase (:data:`TRANSITIONS`; anything else is a bug)."""
        nxt = TRANSITIONS.get((self.phase, step))
        if nxt is None:
            raise TurnStateError(f"turn {self.turn_id}: no transition {step} from {self.phase}")
        self.phase = nxt


class TurnTable:
    """The live turns, oldest first, and what can be asked of them (the machine changes them)."""

    def __init__(self) -> None:
        self._turns: dict[int, TurnState] = {}

    def phase(self, turn_id: int) -> Phase:
        return self._turns[turn_id].phase if turn_id in self._turns else Phase.DONE

    def spoken_over(self, turn_id: int) -> int | None:
        return self._turns[turn_id].spoken_over if turn_id in self._turns else None

    @property
    def audible(self) -> int | None:
        """The reply the listener is hearing (or that is paused by their speech)."""
        return None if (t := self._latest(HEARD_PHASES)) is None else t.turn_id

    @property
    def capturing(self) -> int | None:
        """The turn whose utterance still takes the input (not sealed; at most one is not)."""
        return next((t.turn_id for t in self._turns.values() if not t.sealed), None)

    @property
    def replying(self) -> list[int]:
        """Turns whose reply task runs: in progress, or INTERRUPTED until the task ends."""
        return [t.turn_id for t in self._turns.values() if t.phase in (*REPLY_PHASES, Phase.INTERRUPTED)]

    @property
    def live(self) -> list[int]:
        """Turns not DONE, oldest first."""
        return list(self._turns)

    def _latest(self, phases: frozenset[Phase], *, spoken: bool = False) -> TurnState | None:
        turns = reversed(self._turns.values())  # spoken: of the user's speech (not a reply asked for)
        return next((t for t in turns if t.phase in phases and (t.onset_ns is not None or not spoken)), None)

    def _queued(self, t: TurnState) -> bool:
        """``t``, a reply asked for (not heard yet), waits for an earlier one: heard now (playing or
        paused), or to be heard first (asked for too, answering the user's words, or held itself).
        One reply has the floor at a time. (A reply to the user's words is not held: their speech
        paused the reply it was said over, and the words cut that reply before they are answered.)"""
        return (
            t.phase is Phase.REPLYING
            and t.onset_ns is None
            and any(
                e.phase in HEARD_PHASES
                or (e.phase is Phase.REPLYING and (e.held or e.answered or e.onset_ns is None))
                for e in self._turns.values()
                if e.turn_id < t.turn_id
            )
        )
