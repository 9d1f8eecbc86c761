"""The turn machine never leaves a reply paused, or a turn open, once the user falls silent.

Twice a reply was found paused for good (a short stop the VAD never made a turn of; a
response asked for while the user spoke): nothing but a transcript resolves a pause, and
in both cases no transcript was to come. This drives the machine (no event loop, no audio)
with random conversations -- speech, hesitations, echo, push-to-talk, commits and clears,
replies asked for, interrupts and cancels, at random moments -- and a simulated session that
answers its commands as the real one does, after random delays: a turn that ended is
transcribed, a reply is heard (not while its first audio is held) and plays to its end (its
playback stands still while it is paused), a cancelled or dismissed reply's task ends. Then
the user is silent. Whatever came before, every turn must be over by then; and at no moment
are two replies heard at once (a response asked for while another still plays waits for it).

Frames as in tests/test_turnstate.py: ``#`` voiced, ``~`` between the VAD's thresholds,
``.`` silence, 32 ms each.
"""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_turnstate import (
    BARGE,
    MANUAL,
    TURN,
    VAD,
    Audible,
    Cancel,
    Clear,
    Commit,
    Configure,
    Driver,
    Finished,
    Frames,
    Heard,
    Input,
    Interrupt,
    PttDown,
    PttUp,
    Respond,
    Sound,
    Words,
    machine,
)

from vad.end_of_turn import Cue
from voice_pipeline.config import BargeInConfig, TurnConfig, VADConfig
from voice_pipeline.turntaking.machine import TurnMachine
from voice_pipeline.turntaking.messages import (
    Answer,
    BeginReply,
    CancelReply,
    Command,
    ContinueTurn,
    Dismiss,
    DropTurn,
    EndTurn,
    HoldReply,
    Keep,
    Prefetch,
    Speculate,
    StopSpeculating,
    TurnOptions,
)
from voice_pipeline.turntaking.phases import HEARD_PHASES, Phase

#: what a turn may be heard to say: nothing, a backchannel, a stop, a question
TEXTS = ("", "uh-huh", "stop", "okay", "what time is it", "tell me about the weather tomorrow")
#: silent frames after the conversation: far more than any wait, hold or grace (10 s)
SETTLE_FRAMES = 320


@dataclass
class Session:
    """The session's side, simulated: what each command leads to, after a random delay in frames."""

    d: Driver
    rnd: random.Random
    due: list[tuple[int, int, int, Input]] = field(default_factory=list)  # (frame, order, turn, input)
    answered: set[int] = field(default_factory=set)  # its words are to be answered: it will play
    prefetched: set[int] = field(default_factory=set)  # its reply was begun in a pause
    waiting: set[int] = field(default_factory=set)  # its reply task waits for its words
    held: set[int] = field(default_factory=set)  # its first audio is held back: nothing is sent
    order: int = 0

    @property
    def m(self) -> TurnMachine:
        return self.d.m

    def later(self, frames: int, turn: int, step: Input) -> None:
        self.order += 1
        self.due.append((self.d.frames + frames, self.order, turn, step))

    def forget(self, turn: int, *kinds: type) -> None:
        """Drop what was to come of ``turn`` (of those ``kinds`` only, if any are named)."""
        kinds = kinds or (object,)
        self.due = [x for x in self.due if x[2] != turn or not isinstance(x[3], kinds)]

    def carry_out(self, cmds: list[Command]) -> None:
        for c in cmds:
            match c:
                case Speculate(turn_id=t):  # the words and the sound of the pause, or one of them
                    self.later(self.rnd.randint(0, 8), t, Words(self.rnd.choice(list(Cue))))
                    self.later(self.rnd.randint(0, 8), t, Sound(self.rnd.choice([None, 0.1, 0.5, 0.9])))
                case StopSpeculating(turn_id=t):  # the pause's evidence and prefetch are dropped
                    self.forget(t, Words, Sound)
                    self.prefetched.discard(t)
                case EndTurn(turn_id=t):
                    self.waiting.add(t)
                    self.later(self.rnd.randint(0, 15), t, Heard(t, self.rnd.choice(TEXTS)))
                case Prefetch(turn_id=t):
                    self.prefetched.add(t)
                case Answer(turn_id=t) if t in self.prefetched and self.rnd.random() < 0.3:
                    # a released speculative reply: its first audio was ready, and goes once its words
                    # stand (never before: the session asks the machine about them first, Session._answer)
                    self.answered.add(t)
                    self.later(self.rnd.randint(0, 2), t, Audible(t))
                case BeginReply(turn_id=t) | Answer(turn_id=t):  # asked for, or the words stand
                    self.answered.add(t)
                    self.later(self.rnd.randint(2, 25), t, Audible(t))
                case Dismiss(turn_id=t) | Keep(turn_id=t):
                    self.forget(t)
                    self.later(self.rnd.randint(0, 3), t, Finished(t))  # its task ends unspoken
                case CancelReply(turn_id=t):
                    self.forget(t)
                    self.waiting.discard(t)  # the task is cancelled: it waits for nothing
                    self.later(self.rnd.randint(0, 3), t, Finished(t))
                case HoldReply(turn_id=t, held=True):
                    self.held.add(t)
                case HoldReply(turn_id=t, held=False):
                    self.held.discard(t)
                case ContinueTurn(turn_id=t) | DropTurn(turn_id=t):
                    self.forget(t)  # its transcription and its reply are dropped
                    self.waiting.discard(t)
                    self.answered.discard(t)
                    self.prefetched.discard(t)
                case _:
                    pass

    def apply(self, step: Input) -> None:
        if isinstance(step, Audible) and self.m.phase(step.turn) is not Phase.REPLYING:
            return  # cancelled or continued meanwhile
        if isinstance(step, Words | Sound) and self.m.user is None:
            return  # the pause it was about is over
        if isinstance(step, Heard):
            self.waiting.discard(step.turn)
        self.carry_out(self.d.apply(step))
        if isinstance(step, Audible) and self.m.phase(step.turn) is Phase.AUDIBLE:
            self.later(self.rnd.randint(1, 40), step.turn, Finished(step.turn))  # played to its end

    def may_respond(self) -> bool:
        """The realtime bridge takes one ``response.create`` at a time: until the last response
        was generated (``response.done``), which may be before its audio was heard to its end."""
        return all(
            self.m.phase(t) in HEARD_PHASES or t in self.held
            for t in self.m.replying
            if self.m.phase(t) is not Phase.INTERRUPTED
        )

    def frame(self, ch: str, echo: bool = False) -> None:
        heard = [t for t in self.m.live if self.m.phase(t) in HEARD_PHASES]
        assert len(heard) <= 1, f"two replies are heard at once: {heard}"
        self.carry_out(self.d.apply(Frames(ch, echo)))
        now = self.d.frames
        ready = sorted(x for x in self.due if x[0] <= now)
        self.due = [x for x in self.due if x[0] > now]
        for _, _, turn, step in ready:
            if isinstance(step, Finished) and (self.m.phase(turn) is Phase.PAUSED or turn in self.waiting):
                self.later(1, turn, step)  # playback stands still while paused; the task waits for words
                continue
            if isinstance(step, Audible) and turn in self.held:
                self.later(1, turn, step)  # nothing is sent while it is held
                continue
            self.apply(step)


#: one thing the user (or the client) does: speech, silence, echo, or a client event
ACTION = st.one_of(
    st.tuples(st.just("say"), st.text(alphabet="#~.", min_size=1, max_size=40)),
    st.tuples(st.just("quiet"), st.integers(1, 60)),
    st.tuples(st.just("echo"), st.integers(1, 20)),
    st.tuples(st.just("ptt"), st.text(alphabet="#~.", min_size=0, max_size=30)),  # key held, then let go
    st.tuples(st.sampled_from(["respond", "interrupt", "cancel", "commit", "clear"]), st.just(0)),
)

#: the defaults, at the VAD's real 32 ms frames; and the short settings of the script tests
#: (manual turns: the turn in progress is committed or cleared before the silence)
CONFIGS = {
    "defaults": (VADConfig(), TurnConfig(), BargeInConfig()),
    "short": (VAD, TURN, BARGE),
    "no resume": (VAD, TURN, dataclasses.replace(BARGE, resume_after_false_interruption=False)),
    "no barge-in": (VAD, TURN, dataclasses.replace(BARGE, enabled=False)),
    "client answers": (VAD, TURN, BARGE),  # auto replies off: a turn's words wait for response.create
    "manual": (VAD, TURN, BARGE),  # turn_detection null: the client commits each turn, and asks
}


#: VP_FUZZ_EXAMPLES=N: N random examples instead of the fixed ones (to search for more)
EXAMPLES = os.environ.get("VP_FUZZ_EXAMPLES")


@pytest.mark.parametrize("config", list(CONFIGS))
@settings(
    max_examples=int(EXAMPLES or 300),
    deadline=None,
    database=None,
    derandomize=not EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(actions=st.lists(ACTION, min_size=1, max_size=25), seed=st.integers(0, 2**32 - 1))
def test_every_turn_is_over_once_the_user_is_silent(
    config: str, actions: list[tuple[str, object]], seed: int
) -> None:
    vad, turn, barge = CONFIGS[config]
    sim = Session(Driver(machine(vad, turn, barge)), random.Random(seed))
    if config == "client answers":
        sim.apply(Configure(TurnOptions(auto_reply=False)))
    if config == "manual":
        sim.apply(Configure(MANUAL))
    for kind, arg in actions:
        match kind:
            case "say":
                for ch in str(arg):
                    sim.frame(ch)
            case "quiet":
                for _ in range(int(str(arg))):
                    sim.frame(".")
            case "echo":  # the assistant's own voice, heard back (the echo probe says so)
                for _ in range(int(str(arg))):
                    sim.frame("#", echo=True)
            case "respond" if sim.may_respond():
                sim.apply(Respond())
            case "interrupt":
                sim.apply(Interrupt())
            case "ptt":
                sim.apply(PttDown())
                for ch in str(arg):
                    sim.frame(ch)
                sim.apply(PttUp())
            case "commit":
                sim.apply(Commit())
            case "clear":
                sim.apply(Clear())
            case "cancel" if responses := [t for t in sim.m.live if t in sim.answered]:
                sim.apply(Cancel(sim.rnd.choice(responses)))  # a client cancels a response it was told of
    if config == "manual":  # a turn is open until the client commits (or clears) it
        sim.apply(sim.rnd.choice([Commit(), Clear()]))
    for _ in range(SETTLE_FRAMES):
        sim.frame(".")
    left = {t: sim.m.phase(t) for t in sim.m.live}
    if config == "manual":  # the input goes on into the next turn, open until the next commit
        assert sim.m.user is not None and left.pop(sim.m.user) is Phase.LISTENING
        assert not left, (left, sim.due)
    else:
        assert not left and sim.m.user is None, (left, sim.due)
