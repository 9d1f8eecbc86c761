"""The turn state machine, table-driven: scripts of inputs, the commands and phases they cause.

No event loop, no audio. Frames are written as in tests/test_vad_endpointer.py, one
character per 32 ms VAD frame: ``#`` voiced (0.9), ``.`` silence (0.0). Time is the
input timeline: frame ``i`` starts at ``i * 32 ms``.

Small numbers so the scripts stay short: min speech 2 frames, end silence (short
wait) 3 frames, unsure (medium) 6, incomplete (long) 10, continuation grace 3 frames,
barge-in pause after 2 voiced frames, confirm after 5, pre-roll 1 frame.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from vad.end_of_turn import Cue, EndOfTurnPolicy, Rule
from voice_pipeline.config import BargeInConfig, TurnConfig, VADConfig
from voice_pipeline.turntaking.bargein import InterruptionKind
from voice_pipeline.turntaking.ending import FIRST_AUDIO_HOLD_MAX_MS, Continuation
from voice_pipeline.turntaking.machine import TurnMachine
from voice_pipeline.turntaking.messages import (
    Answer,
    BeginReply,
    BeginTurn,
    CancelReason,
    CancelReply,
    Command,
    ContinueTurn,
    Detection,
    Dismiss,
    DropTurn,
    EndTurn,
    EvidenceFound,
    HoldReply,
    Keep,
    PauseReply,
    Prefetch,
    ResumeReply,
    Seal,
    Speculate,
    StartReply,
    StopSpeculating,
    Transcribed,
    TurnOptions,
)
from voice_pipeline.turntaking.phases import TRANSITIONS, Phase, Step, TurnState, TurnStateError

RATE = 16000
F = 512  # samples per frame
FRAME_NS = F * 1_000_000_000 // RATE  # 32 ms
PROB = {"#": 0.9, ".": 0.0, "~": 0.4}  # "~": between the VAD's thresholds (keeps a voiced run alive)

VAD = VADConfig(min_speech_ms=64, end_silence_ms=96, pre_roll_ms=32, max_turn_s=0.0)
#: no patience (its own cases below): a continued speaker's waits stay as the policy's
TURN = TurnConfig(unsure_silence_ms=192, incomplete_silence_ms=320, continuation_grace_ms=96, patience_ms=0)
#: 4 frames, a quarter of it 1 frame; the gap caps the cover of a pause the speaker went on after
#: (the pause and 200 ms, at most 220 ms here) below the patience, which these cases count
PATIENT = dataclasses.replace(TURN, patience_ms=128, continuation_max_gap_ms=320)
#: room for a hesitation's patience below the long wait; the gap caps it (100 ms short of it)
HESITANT = dataclasses.replace(TURN, incomplete_silence_ms=960, patience_ms=480, continuation_max_gap_ms=600)
BARGE = BargeInConfig(min_speech_ms=64, confirm_speech_ms=160)
POLICY = EndOfTurnPolicy(VAD.end_silence_ms, TURN.unsure_silence_ms, TURN.incomplete_silence_ms)
LONG_TURNS = VADConfig(min_speech_ms=64, end_silence_ms=96, pre_roll_ms=32, max_turn_s=1.0)
MANUAL = TurnOptions(detection=Detection.MANUAL, auto_reply=False)


def t_of(sample: int) -> int:
    return sample * 1_000_000_000 // RATE


# ---------------------------------------------------------------- script steps


@dataclass(frozen=True)
class Frames:
    pattern: str
    echo: bool = False  # the long-window echo probe says it is the assistant's voice


@dataclass(frozen=True)
class Words:
    cue: Cue


@dataclass(frozen=True)
class Sound:
    p: float | None  # None = the model failed


@dataclass(frozen=True)
class Heard:
    """The final transcript of ``turn``; ``said``: the reply it was spoken over."""

    turn: int
    text: str
    said: str = ""


@dataclass(frozen=True)
class Audible:
    turn: int


@dataclass(frozen=True)
class Finished:
    turn: int


@dataclass(frozen=True)
class Interrupt:
    pass


@dataclass(frozen=True)
class PttDown:
    pass


@dataclass(frozen=True)
class PttUp:
    pass


@dataclass(frozen=True)
class Commit:
    """The client commits its input (a realtime input_audio_buffer.commit)."""


@dataclass(frozen=True)
class Clear:
    """The client clears its input (input_audio_buffer.clear)."""


@dataclass(frozen=True)
class Respond:
    """The client asks for a reply with no speech (response.create)."""


@dataclass(frozen=True)
class Cancel:
    turn: int


@dataclass(frozen=True)
class Tick:
    """``ms`` pass with no input (the client stopped sending); the runtime tells the machine."""

    ms: int


@dataclass(frozen=True)
class Configure:
    options: TurnOptions
    barge: BargeInConfig = BARGE
    vad: VADConfig = VAD


Input = (
    Frames
    | Words
    | Sound
    | Heard
    | Audible
    | Finished
    | Interrupt
    | PttDown
    | PttUp
    | Commit
    | Clear
    | Respond
    | Cancel
    | Configure
    | Tick
)


@dataclass
class Driver:
    m: TurnMachine
    frames: int = 0
    pause_end: int = 0  # speech end of the last Speculate
    idle_ns: int = 0  # time passed with no frame (Tick)

    @property
    def now(self) -> int:
        return self.frames * FRAME_NS + self.idle_ns

    def apply(self, step: Input) -> list[Command]:
        m = self.m
        match step:
            case Frames(pattern=pattern, echo=echo):
                out: list[Command] = []
                for ch in pattern:
                    start = self.now
                    self.frames += 1
                    out += m.frame(PROB[ch], frame_start_ns=start, now_ns=self.now, is_echo=lambda _o: echo)
                for c in out:
                    if isinstance(c, Speculate):
                        self.pause_end = c.speech_end_sample
                return out
            case Words(cue=cue):
                assert m.user is not None
                return m.evidence(EvidenceFound(m.user, self.pause_end, cue=cue))
            case Sound(p=p):
                assert m.user is not None
                if p is None:
                    return m.evidence(EvidenceFound(m.user, self.pause_end, no_sound=True))
                return m.evidence(EvidenceFound(m.user, self.pause_end, p_complete=p))
            case Heard(turn=turn, text=text, said=said):
                return list(m.transcribed(turn, text, said).commands)
            case Audible(turn=turn):
                return m.reply_audible(turn, self.now)
            case Finished(turn=turn):
                return m.reply_finished(turn, self.now)
            case Interrupt():
                return m.interrupt(self.now)
            case PttDown():
                return m.ptt_pressed(self.frames * F, self.now)
            case PttUp():
                return m.ptt_released(self.frames * F)
            case Commit():
                return m.commit(self.frames * F)
            case Clear():
                return m.drop(self.frames * F)
            case Respond():
                return m.respond()
            case Cancel(turn=turn):
                return m.cancel(turn)
            case Tick(ms=ms):
                self.idle_ns += ms * 1_000_000
                return m.tick(self.now)
            case Configure(options=options, barge=barge, vad=vad):
                return m.configure(vad, barge, POLICY, options, position=self.frames * F)
        raise AssertionError(step)  # pragma: no cover


def machine(
    vad: VADConfig = VAD,
    turn: TurnConfig = TURN,
    barge: BargeInConfig = BARGE,
    *,
    model: bool = True,
    semantic: bool = True,
) -> TurnMachine:
    policy = (
        EndOfTurnPolicy(
            vad.end_silence_ms, turn.unsure_silence_ms, turn.incomplete_silence_ms, uses_model=model
        )
        if semantic
        else None
    )
    return TurnMachine(
        vad, turn, barge, sample_rate_hz=RATE, frame_samples=F, time_of=t_of, policy=policy, prefetch=True
    )


def end(
    turn: int, speech_end_frame: int, decided_frame: int, rule: Rule, wait_ms: int, patience_ms: int = 0
) -> Callable[[Command], bool]:
    """Matches an EndTurn without spelling out the evidence."""

    def match(c: Command) -> bool:
        return (
            isinstance(c, EndTurn)
            and c.turn_id == turn
            and (c.end.speech_end_sample, c.end.decided_sample) == (speech_end_frame * F, decided_frame * F)
            and c.end.rule is rule
            and c.end.wait_ms == wait_ms
            and c.end.patience_ms == patience_ms
        )

    match.__name__ = f"EndTurn({turn}, {rule}, frames {speech_end_frame}->{decided_frame})"
    return match


Expect = Command | Callable[[Command], bool]


def held_from(onset_frame: int) -> HoldReply:
    """Turn 1's first audio held for a voice with its onset at that frame: 400 ms at most."""
    return HoldReply(1, True, t_of(onset_frame * F) + FIRST_AUDIO_HOLD_MAX_MS * 1_000_000)


@dataclass(frozen=True)
class Case:
    name: str
    script: list[tuple[Input, list[Expect], dict[int, Phase]]]
    make: Callable[[], TurnMachine] = field(default=machine)


def same(expected: list[Expect], got: list[Command]) -> bool:
    if len(expected) != len(got):
        return False
    return all(
        e(g) if callable(e) and not isinstance(e, type) else e == g
        for e, g in zip(expected, got, strict=True)
    )


L, MF, RE, AU, PA = Phase.LISTENING, Phase.MAYBE_FINISHED, Phase.REPLYING, Phase.AUDIBLE, Phase.PAUSED
DONE = Phase.DONE

Script = list[tuple[Input, list[Expect], dict[int, Phase]]]

# a question: 2 voiced frames (speech starts on the 2nd: onset 0, pre-roll clamped at 0)
ASK: Script = [
    (Frames("##"), [BeginTurn(1, 0, 0, None)], {1: L}),
    (Frames("."), [Speculate(1, 2 * F)], {1: MF}),
]


def answered(turn: int = 1, speech_end_frame: int = 2, decided: int = 5, patience_ms: int = 0) -> Script:
    """The words and the sound say complete: the turn ends after the short wait (and the
    speaker's patience)."""
    wait = 96 + patience_ms
    return [
        (Words(Cue.NEUTRAL), [Prefetch(turn)], {turn: MF}),
        (Sound(0.9), [], {turn: MF}),
        (
            Frames("." * (decided - speech_end_frame - 1)),
            [end(turn, speech_end_frame, decided, Rule.COMPLETE, wait, patience_ms), StartReply(turn)],
            {turn: RE},
        ),
    ]


#: turn 1's reply heard to its end, 3 frames after it became audible
HEARD_TO_ITS_END: Script = [
    *ASK,
    *answered(),
    (Audible(1), [], {1: AU}),
    (Frames("..."), [], {1: AU}),
    (Finished(1), [Seal(1)], {}),
]


def stop_said_after(quiet: str, text: str, verdict: Command, frames_before: int = 8, turn: int = 2) -> Script:
    """``quiet`` frames after the last turn (``frames_before`` frames from the start), ``turn``
    says ``text``: its verdict."""
    onset = (frames_before + len(quiet)) * F
    return [
        (Frames(quiet + "##"), [BeginTurn(turn, onset, onset - 512, None)], {turn: L}),
        (Frames("."), [Speculate(turn, onset + 2 * F)], {turn: MF}),
        *answered(turn, 0, 0)[:2],
        (Frames("...."), [lambda c: isinstance(c, EndTurn), StartReply(turn)], {turn: RE}),
        (Heard(turn, text), [verdict], {turn: RE}),
    ]


# the reply to ASK is audible; the user speaks over it (turn 2) and pauses
SPOKEN_OVER: Script = [
    *ASK,
    *answered(),
    (Audible(1), [], {1: AU}),
    (Frames("...."), [Seal(1)], {1: AU}),
    (
        Frames("##."),
        [PauseReply(1, 9 * FRAME_NS), BeginTurn(2, 9 * F, 8 * F, 1), Speculate(2, 11 * F)],
        {1: PA, 2: MF},
    ),
]
# ... or only a short run: one voiced frame, one between the VAD's thresholds. The barge-in
# count (64 ms) pauses the reply; the VAD's (64 ms above the threshold) would not start a turn
SHORT_OVER_REPLY: Script = [
    *ASK,
    *answered(),
    (Audible(1), [], {1: AU}),
    (Frames("...."), [Seal(1)], {1: AU}),
    (Frames("#~"), [PauseReply(1, 9 * FRAME_NS), BeginTurn(2, 9 * F, 8 * F, 1)], {1: PA, 2: L}),
    (Frames("."), [Speculate(2, 11 * F)], {1: PA, 2: MF}),
]
#: ... and turn 2 ends: neutral words that sound complete (no prefetch over a reply)
ENDS_OVER_REPLY: Script = [
    (Words(Cue.NEUTRAL), [], {1: PA, 2: MF}),
    (Sound(0.9), [], {1: PA, 2: MF}),
    (Frames(".."), [end(2, 11, 14, Rule.COMPLETE, 96), StartReply(2)], {1: PA, 2: RE}),
]
SPOKEN_OVER_ENDED: Script = [*SPOKEN_OVER, *ENDS_OVER_REPLY]
SHORT_OVER_REPLY_ENDED: Script = [*SHORT_OVER_REPLY, *ENDS_OVER_REPLY]
# ... to say stop: the reply is cancelled, and the stop is not answered (14 frames in all)
STOPPED_OVER_REPLY: Script = [
    *SPOKEN_OVER_ENDED,
    (
        Heard(2, "Okay, never mind.", said="sure"),
        [CancelReply(1, CancelReason.WORDS, True), Dismiss(2, InterruptionKind.WORDS)],
        {1: Phase.INTERRUPTED, 2: RE},
    ),
    (Finished(1), [], {2: RE}),
    (Finished(2), [Seal(2)], {}),
]
# the user goes on within the grace after the reply to ASK became audible; the turn ends again
CONTINUED_ENDED: Script = [
    *ASK,
    *answered(),
    (Audible(1), [], {1: AU}),
    (Frames("..#"), [], {1: AU}),
    (Frames("#"), [PauseReply(1, 7 * FRAME_NS), ContinueTurn(1, 7 * F)], {1: L}),
    (Frames("."), [Speculate(1, 9 * F)], {1: MF}),
    *answered(speech_end_frame=9, decided=12),
]

# a realtime client asks for a reply while the user's turn is open; the user's speech goes on
# over it (less than the 800 ms that confirm a barge-in) and pauses it. The turn was not begun
# over a reply, but its words decide the pause all the same: nothing else would resolve it
ASKED_MID_TURN: Script = [
    (Frames("##"), [BeginTurn(1, 0, 0, None)], {1: L}),
    (Respond(), [BeginReply(2), StartReply(2)], {1: L, 2: RE}),
    (Audible(2), [], {1: L, 2: AU}),
    (Frames("####"), [PauseReply(2, 2 * FRAME_NS)], {1: L, 2: PA}),
    (Frames("."), [Speculate(1, 6 * F)], {1: MF, 2: PA}),
    (Words(Cue.NEUTRAL), [], {1: MF, 2: PA}),  # no prefetch: the reply to come may not be wanted
    (Sound(0.9), [], {1: MF, 2: PA}),
    (Frames("..."), [end(1, 6, 9, Rule.COMPLETE, 96), StartReply(1)], {1: RE, 2: PA}),
]


#: a response plays, another waits behind it, and speech begins over the first
WAITING_OVER: Script = [
    (Respond(), [BeginReply(1), StartReply(1)], {1: RE}),
    (Audible(1), [], {1: AU}),
    (Respond(), [BeginReply(2), HoldReply(2, True), StartReply(2)], {1: AU, 2: RE}),
    (Frames("##"), [PauseReply(1, 0), BeginTurn(3, 0, 0, 1)], {1: PA, 2: RE, 3: L}),
]
#: ... and that speech, a short one, ended (its words decide)
WAITING_OVER_ENDED: Script = [
    *WAITING_OVER,
    (Frames("."), [Speculate(3, 2 * F)], {1: PA, 2: RE, 3: MF}),
    (Frames("." * 9), [end(3, 2, 12, Rule.NO_VERDICT, 320), StartReply(3)], {1: PA, 2: RE, 3: RE}),
]

CASES = [
    Case("a complete question ends after the short wait", [*ASK, *answered()]),
    Case(
        "an unfinished sentence waits the long silence, then ends anyway",
        [
            *ASK,
            (Words(Cue.INCOMPLETE), [], {1: MF}),  # no prefetch for an unfinished sentence
            (Sound(0.98), [], {1: MF}),  # synthetic voices sound finished: the words hold it
            (Frames("." * 8), [], {1: MF}),  # the short and the medium wait pass
            (Frames("."), [end(1, 2, 12, Rule.INCOMPLETE, 320), StartReply(1)], {1: RE}),
        ],
    ),
    Case(
        "a pause mid-sentence: the speaker goes on, one turn, then a complete end",
        [
            *ASK,
            (Words(Cue.INCOMPLETE), [], {1: MF}),
            (Frames("...."), [], {1: MF}),
            (Frames("#"), [StopSpeculating(1)], {1: L}),
            (Frames("#."), [Speculate(1, 9 * F)], {1: MF}),
            *answered(speech_end_frame=9, decided=12),
        ],
    ),
    Case(
        "the model hears an unfinished sentence the words do not show: the long wait",
        [
            *ASK,
            (Words(Cue.NEUTRAL), [Prefetch(1)], {1: MF}),
            (Sound(0.1), [], {1: MF}),
            (Frames("." * 9), [end(1, 2, 12, Rule.INCOMPLETE, 320), StartReply(1)], {1: RE}),
        ],
    ),
    Case(
        "words and sound disagree (a question that sounds unfinished): the medium wait",
        [
            *ASK,
            (Sound(0.2), [], {1: MF}),
            (Words(Cue.COMPLETE), [Prefetch(1)], {1: MF}),
            (Frames("." * 5), [end(1, 2, 8, Rule.UNSURE, 192), StartReply(1)], {1: RE}),
        ],
    ),
    Case(
        "late evidence: the turn ends the moment it arrives",
        [
            *ASK,
            (Frames("...."), [], {1: MF}),  # past the short wait, nothing known
            (Words(Cue.NEUTRAL), [Prefetch(1)], {1: MF}),  # the sound is still out
            (Sound(0.9), [end(1, 2, 7, Rule.COMPLETE, 96), StartReply(1)], {1: RE}),
        ],
    ),
    Case(
        "no words by the long wait: ends there (they are waited for: the reply is made from them)",
        [
            *ASK,
            (Frames("." * 8), [], {1: MF}),  # the short and the medium wait pass
            (Frames("."), [end(1, 2, 12, Rule.NO_VERDICT, 320), StartReply(1)], {1: RE}),
        ],
    ),
    Case(
        "words back after the medium wait: the turn ends as soon as they allow it",
        [
            *ASK,
            (Frames("." * 7), [], {1: MF}),
            # a question, the sound not back: the medium wait, passed already
            (Words(Cue.COMPLETE), [Prefetch(1), end(1, 2, 10, Rule.NO_VERDICT, 192), StartReply(1)], {1: RE}),
        ],
    ),
    Case(
        "words back after the medium wait that read unfinished hold the turn",
        [
            *ASK,
            (Frames("." * 7), [], {1: MF}),
            (Words(Cue.INCOMPLETE), [], {1: MF}),
            (Frames("."), [], {1: MF}),
            (Frames("."), [end(1, 2, 12, Rule.INCOMPLETE, 320), StartReply(1)], {1: RE}),
        ],
    ),
    Case(
        "a failed turn model loses its vote: the words and the silence decide",
        [
            *ASK,
            (Sound(None), [], {1: MF}),
            (Words(Cue.NEUTRAL), [Prefetch(1)], {1: MF}),
            (Frames(".."), [end(1, 2, 5, Rule.COMPLETE, 96), StartReply(1)], {1: RE}),
        ],
    ),
    Case(
        "without a model the words alone decide",
        [
            *ASK,
            (Words(Cue.NEUTRAL), [Prefetch(1)], {1: MF}),
            (Frames(".."), [end(1, 2, 5, Rule.COMPLETE, 96), StartReply(1)], {1: RE}),
        ],
        make=lambda: machine(model=False),
    ),
    Case(
        "semantic policy off: silence alone, whatever the words",
        [
            *ASK,
            (Words(Cue.INCOMPLETE), [], {1: MF}),
            (Frames(".."), [end(1, 2, 5, Rule.SILENCE, 96), StartReply(1)], {1: RE}),
        ],
        make=lambda: machine(semantic=False),
    ),
    Case(
        "speech before the reply is audible continues the turn",
        [
            *ASK,
            *answered(),
            (Frames("#"), [held_from(5)], {1: RE}),  # nothing of the reply goes out now
            (Frames("#"), [ContinueTurn(1, 5 * F), HoldReply(1, False)], {1: L}),
            (Frames("."), [Speculate(1, 7 * F)], {1: MF}),
            *answered(speech_end_frame=7, decided=10),
            (Audible(1), [], {1: AU}),
            (Frames("." * 3), [], {1: AU}),
            (Frames("."), [Seal(1)], {1: AU}),  # the grace is over
            (Finished(1), [], {}),
        ],
    ),
    Case(
        "a voice that may be the user going on holds the reply's first audio; too short for speech, it goes",
        [
            *ASK,
            *answered(),
            (Frames("#"), [held_from(5)], {1: RE}),
            (Frames("."), [HoldReply(1, False)], {1: RE}),  # a cough, a click: the reply goes
            (Audible(1), [], {1: AU}),
            (Frames("#"), [], {1: AU}),  # once audible, speech over it is continuation's or barge-in's
        ],
    ),
    Case(
        "a voice that neither becomes speech nor stops holds the first audio 400 ms at most",
        [
            *ASK,
            *answered(),
            (Frames("#"), [held_from(5)], {1: RE}),
            (Frames("~" * 11), [], {1: RE}),  # 384 ms since its onset: still held
            (Frames("~"), [HoldReply(1, False)], {1: RE}),  # 416 ms: a hum, not the user
            (Frames("~"), [], {1: RE}),
        ],
    ),
    Case(
        "the input stops while a voice holds the first audio: the hold ends on time all the same",
        [
            *ASK,
            *answered(),
            (Frames("#"), [held_from(5)], {1: RE}),  # its onset at 160 ms, now 192 ms: held until 560
            (Tick(367), [], {1: RE}),  # 559 ms
            (Tick(1), [HoldReply(1, False)], {1: RE}),  # no frame came, the reply goes
            (Tick(100), [], {1: RE}),
            (Frames("."), [], {1: RE}),
        ],
    ),
    Case(
        "a voice past the maximum gap holds nothing: its speech is a new turn, not the user going on",
        [
            *ASK,
            *answered(),
            (Frames("#"), [], {1: RE}),
        ],
        make=lambda: machine(turn=dataclasses.replace(TURN, continuation_max_gap_ms=64)),
    ),
    Case(
        "a push-to-talk turn's reply is never held (a new key press is a new turn)",
        [
            (PttDown(), [BeginTurn(1, 0, 0, None)], {1: L}),
            (Frames("##"), [], {1: L}),
            (PttUp(), [end(1, 2, 2, Rule.PUSH_TO_TALK, 0), StartReply(1), Seal(1)], {1: RE}),
            (Frames("#"), [], {1: RE}),
        ],
    ),
    Case(
        "a continued speaker gets patience: the short wait grows, then shrinks turn by turn",
        [
            *ASK,
            *answered(),  # 96 ms
            (Frames("##"), [held_from(5), ContinueTurn(1, 5 * F), HoldReply(1, False)], {1: L}),
            (Frames("."), [Speculate(1, 7 * F)], {1: MF}),
            *answered(speech_end_frame=7, decided=14, patience_ms=128),  # 96 + 128
            (Finished(1), [Seal(1)], {}),
            (Frames("##"), [BeginTurn(2, 14 * F, 14 * F, None)], {2: L}),
            (Frames("."), [Speculate(2, 16 * F)], {2: MF}),
            *answered(2, speech_end_frame=16, decided=23, patience_ms=128),  # the next turn: in full
            (Finished(2), [Seal(2)], {}),
            (Frames("##"), [BeginTurn(3, 23 * F, 23 * F, None)], {3: L}),
            (Frames("."), [Speculate(3, 25 * F)], {3: MF}),
            *answered(3, speech_end_frame=25, decided=31, patience_ms=96),  # a quarter less
            (Finished(3), [Seal(3)], {}),
            # turn 4 waits 32 more; its words hold a pause of 224 ms (past the 192 ms medium
            # wait: patience kept it) and the speaker goes on: patience is back in full
            (Frames("##"), [BeginTurn(4, 31 * F, 31 * F, None)], {4: L}),
            (Frames("."), [Speculate(4, 33 * F)], {4: MF}),
            (Words(Cue.INCOMPLETE), [], {4: MF}),
            (Frames("......"), [], {4: MF}),
            (Frames("#"), [StopSpeculating(4)], {4: L}),
            (Frames("#."), [Speculate(4, 42 * F)], {4: MF}),
            *answered(4, speech_end_frame=42, decided=49, patience_ms=128),
        ],
        make=lambda: machine(turn=PATIENT),
    ),
    Case(
        "a speaker who hesitated in a turn: the rest of it waits as long as they paused, the next does not",
        [
            *ASK,
            (Words(Cue.INCOMPLETE), [], {1: MF}),  # the long wait holds the pause
            (Frames("." * 12), [], {1: MF}),
            (Frames("#"), [StopSpeculating(1)], {1: L}),  # 416 ms: a hesitation (320 ms or more)
            (Frames("#."), [Speculate(1, 17 * F)], {1: MF}),
            # a phrase that reads and sounds finished: the short wait covers the 416 ms hesitation
            # and the margin, short of the gap: min(416 + 200, 600 - 100) = 500 ms (16 frames)
            *answered(speech_end_frame=17, decided=33, patience_ms=404),
            (Finished(1), [Seal(1)], {}),
            (Frames("##"), [BeginTurn(2, 33 * F, 33 * F, None)], {2: L}),
            (Frames("."), [Speculate(2, 35 * F)], {2: MF}),
            *answered(2, speech_end_frame=35, decided=38),  # a new turn: the short wait
        ],
        make=lambda: machine(turn=HESITANT),
    ),
    Case(
        "speech starting within the grace after the reply became audible continues the turn",
        [
            *ASK,
            *answered(),
            (Audible(1), [], {1: AU}),
            (Frames("..#"), [], {1: AU}),  # onset 64 ms after the first audio
            # the barge-in tracker pauses it at the same frame the speech starts: it continues
            (Frames("#"), [PauseReply(1, 7 * FRAME_NS), ContinueTurn(1, 7 * F)], {1: L}),
        ],
    ),
    Case(
        "speech within the grace continues the turn before the tracker would pause it",
        [
            *ASK,
            *answered(),
            (Audible(1), [], {1: AU}),
            (Frames("#"), [], {1: AU}),
            (Frames("#"), [ContinueTurn(1, 5 * F)], {1: L}),  # the pause needs 5 voiced frames here
        ],
        make=lambda: machine(barge=BargeInConfig(min_speech_ms=160, confirm_speech_ms=320)),
    ),
    Case(
        "a turn continued within the grace only to say stop is not answered: the reply was dropped",
        [
            *CONTINUED_ENDED,
            (Heard(1, "What is the capital of France? Stop!"), [Dismiss(1, None)], {1: RE}),
            (Finished(1), [Seal(1)], {}),
        ],
    ),
    Case(
        "a turn continued to say stop and ask something else is answered",
        [
            *CONTINUED_ENDED,
            (Heard(1, "What is the capital of France? Stop, what time is it?"), [Answer(1, None)], {1: RE}),
        ],
    ),
    Case(
        "stop said when no reply was cut is answered like any words",
        [*ASK, *answered(), (Heard(1, "Stop."), [Answer(1, None)], {1: RE})],
    ),
    Case(
        "stop said as a reply was heard to its end was meant for it: not answered",
        [*HEARD_TO_ITS_END, *stop_said_after(".", "Stop.", Dismiss(2, None))],
    ),
    Case(
        "... but other words said then are answered",
        [*HEARD_TO_ITS_END, *stop_said_after(".", "And what about Italy?", Answer(2, None))],
    ),
    Case(
        "stop said later than barge_in.stop_after_reply_ms after the reply's end is answered",
        [*HEARD_TO_ITS_END, *stop_said_after("." * 47, "Stop.", Answer(2, None))],  # 1504 ms > 1500
    ),
    Case(
        "... and one said after a reply that was not heard to its end, too",
        [
            *ASK,
            *answered(),
            (Finished(1), [Seal(1)], {}),  # cancelled (a client's response.cancel) before it was heard
            *stop_said_after(".", "Stop.", Answer(2, None), frames_before=5),
        ],
    ),
    Case(
        "stop spoken over the reply cancels it, and is not answered",
        STOPPED_OVER_REPLY,
    ),
    Case(
        "a stop said again right after a stop that cut the reply is meant for it too: not answered",
        [
            *STOPPED_OVER_REPLY,
            *stop_said_after(".", "Stop!", Dismiss(3, None), frames_before=14, turn=3),
        ],
    ),
    Case(
        "... however long after it (longer than barge_in.stop_after_reply_ms), with no reply heard since",
        [
            *STOPPED_OVER_REPLY,
            *stop_said_after("." * 60, "Stop!", Dismiss(3, None), frames_before=14, turn=3),
        ],
    ),
    Case(
        "... until a reply is heard to its end: a stop said long after that one is answered",
        [
            *STOPPED_OVER_REPLY,
            *stop_said_after(".", "What time is it?", Answer(3, None), frames_before=14, turn=3),
            (Audible(3), [], {3: AU}),
            (Frames("..."), [], {3: AU}),
            (Finished(3), [Seal(3)], {}),
            *stop_said_after("." * 47, "Stop.", Answer(4, None), frames_before=25, turn=4),
        ],
    ),
    Case(
        "a reply that ends while paused (its task failed, or was closed) is done",
        [
            *ASK,
            *answered(),
            (Audible(1), [], {1: AU}),
            (Frames("...."), [Seal(1)], {1: AU}),
            (Frames("##"), [PauseReply(1, 9 * FRAME_NS), BeginTurn(2, 9 * F, 8 * F, 1)], {1: PA, 2: L}),
            (Finished(1), [], {2: L}),
            (Frames("."), [Speculate(2, 11 * F)], {2: MF}),
        ],
    ),
    Case(
        "speech after the grace is a barge-in: paused at once, confirmed by its words",
        [
            *ASK,
            *answered(),
            (Audible(1), [], {1: AU}),
            (Frames("...."), [Seal(1)], {1: AU}),
            (Frames("##"), [PauseReply(1, 9 * FRAME_NS), BeginTurn(2, 9 * F, 8 * F, 1)], {1: PA, 2: L}),
            (Frames("."), [Speculate(2, 11 * F)], {1: PA, 2: MF}),
            (Words(Cue.NEUTRAL), [], {1: PA, 2: MF}),  # no prefetch for an utterance over a reply
            (Sound(0.9), [], {1: PA, 2: MF}),
            (Frames(".."), [end(2, 11, 14, Rule.COMPLETE, 96), StartReply(2)], {1: PA, 2: RE}),
            (
                Heard(2, "tell me more", said="sure"),
                [CancelReply(1, CancelReason.WORDS, True), Answer(2, InterruptionKind.WORDS)],
                {1: Phase.INTERRUPTED, 2: RE},
            ),
            (Finished(1), [], {2: RE}),
            (Audible(2), [], {2: AU}),
            (Frames("...."), [Seal(2)], {2: AU}),
            (Finished(2), [], {}),
        ],
    ),
    Case(
        "speech too short for the VAD's count to start a turn, but long enough to pause the reply, "
        "is a turn at once: its words decide (a stop)",
        [
            *SHORT_OVER_REPLY_ENDED,
            (
                Heard(2, "Stop."),
                [CancelReply(1, CancelReason.WORDS, True), Dismiss(2, InterruptionKind.WORDS)],
                {1: Phase.INTERRUPTED, 2: RE},
            ),
        ],
    ),
    Case(
        "... (no words: a cough) and the reply resumes; before, it stayed paused for good",
        [
            *SHORT_OVER_REPLY_ENDED,
            (
                Heard(2, ""),
                [ResumeReply(1, InterruptionKind.NO_WORDS), Dismiss(2, InterruptionKind.NO_WORDS)],
                {1: AU, 2: RE},
            ),
        ],
    ),
    Case(
        "a backchannel over the reply: it resumes where it stopped, no answer",
        [
            *SPOKEN_OVER_ENDED,
            (
                Heard(2, "uh-huh"),
                [ResumeReply(1, InterruptionKind.BACKCHANNEL), Dismiss(2, InterruptionKind.BACKCHANNEL)],
                {1: AU, 2: RE},
            ),
            (Finished(2), [Seal(2)], {1: AU}),
        ],
    ),
    Case(
        "a backchannel without resume_after_false_interruption stops the reply",
        [
            *SPOKEN_OVER,
            (Frames("." * 9), [end(2, 11, 21, Rule.NO_VERDICT, 320), StartReply(2)], {1: PA, 2: RE}),
            (
                Heard(2, "okay"),
                [
                    CancelReply(1, CancelReason.STOPPED_BY_BACKCHANNEL),
                    Dismiss(2, InterruptionKind.BACKCHANNEL),
                ],
                {1: Phase.INTERRUPTED, 2: RE},
            ),
        ],
        make=lambda: machine(
            barge=BargeInConfig(
                min_speech_ms=64, confirm_speech_ms=160, resume_after_false_interruption=False
            )
        ),
    ),
    Case(
        "the assistant's own words coming back are echo: it resumes",
        [
            *ASK,
            *answered(),
            (Audible(1), [], {1: AU}),
            (Frames("...."), [Seal(1)], {1: AU}),
            (Frames("##"), [PauseReply(1, 9 * FRAME_NS), BeginTurn(2, 9 * F, 8 * F, 1)], {1: PA, 2: L}),
            (
                Frames("." * 10),
                [Speculate(2, 11 * F), end(2, 11, 21, Rule.NO_VERDICT, 320), StartReply(2)],
                {1: PA, 2: RE},
            ),
            (
                Heard(2, "the answer is forty two", said="Sure, the answer is forty two."),
                [ResumeReply(1, InterruptionKind.ECHO), Dismiss(2, InterruptionKind.ECHO)],
                {1: AU, 2: RE},
            ),
        ],
    ),
    Case(
        "echo the long window catches never pauses the reply",
        [
            *ASK,
            *answered(),
            (Audible(1), [], {1: AU}),
            (Frames("...."), [Seal(1)], {1: AU}),
            # the per-frame gate let it through (a new turn starts), the long probe says echo
            (Frames("##", echo=True), [BeginTurn(2, 9 * F, 8 * F, 1)], {1: AU, 2: L}),
        ],
    ),
    Case(
        "long speech over the reply confirms the interruption before its words are known",
        [
            *ASK,
            *answered(),
            (Audible(1), [], {1: AU}),
            (Frames("...."), [Seal(1)], {1: AU}),
            (Frames("##"), [PauseReply(1, 9 * FRAME_NS), BeginTurn(2, 9 * F, 8 * F, 1)], {1: PA, 2: L}),
            (Frames("###"), [CancelReply(1, CancelReason.LONG_SPEECH, True)], {1: Phase.INTERRUPTED, 2: L}),
        ],
    ),
    Case(
        "an explicit interrupt stops a reply being prepared and one that plays",
        [
            *ASK,
            *answered(),
            (Interrupt(), [CancelReply(1, CancelReason.EXPLICIT, True)], {1: Phase.INTERRUPTED}),
            (Finished(1), [Seal(1)], {}),
            (Frames("##"), [BeginTurn(2, 5 * F, 5 * F, None)], {2: L}),  # pre-roll clamped: turn 1's end
            (Frames("."), [Speculate(2, 7 * F)], {2: MF}),
            *answered(turn=2, speech_end_frame=7, decided=10),
            (Audible(2), [], {2: AU}),
            (
                Interrupt(),
                [PauseReply(2, 10 * FRAME_NS), CancelReply(2, CancelReason.EXPLICIT, True)],
                {2: Phase.INTERRUPTED},
            ),
        ],
    ),
    Case(
        "push-to-talk decides the turn: pauses and silence do not end it",
        [
            (Frames(".."), [], {}),
            (PttDown(), [BeginTurn(1, 2 * F, 1 * F, None)], {1: L}),
            (Frames("##...##......"), [], {1: L}),
            (PttUp(), [end(1, 15, 15, Rule.PUSH_TO_TALK, 0), StartReply(1), Seal(1)], {1: RE}),
            # a push-to-talk turn is not continued: speech now is a new turn
            (
                Frames("##"),
                [CancelReply(1, CancelReason.UNHEARD), BeginTurn(2, 15 * F, 15 * F, None)],
                {1: Phase.INTERRUPTED, 2: L},
            ),
        ],
    ),
    Case(
        "push-to-talk pressed while the assistant speaks interrupts it",
        [
            *ASK,
            *answered(),
            (Audible(1), [], {1: AU}),
            (
                PttDown(),
                [
                    PauseReply(1, 5 * FRAME_NS),
                    CancelReply(1, CancelReason.EXPLICIT, True),
                    BeginTurn(2, 5 * F, 4 * F, None),
                    Seal(1),
                ],
                {1: Phase.INTERRUPTED, 2: L},
            ),
            (
                PttUp(),
                [end(2, 5, 5, Rule.PUSH_TO_TALK, 0), StartReply(2), Seal(2)],
                {1: Phase.INTERRUPTED, 2: RE},
            ),
        ],
    ),
    Case(
        "push-to-talk pressed during a VAD pause takes the turn over",
        [
            *ASK,
            (PttDown(), [StopSpeculating(1)], {1: L}),
            (Frames("...."), [], {1: L}),
            (PttUp(), [end(1, 7, 7, Rule.PUSH_TO_TALK, 0), StartReply(1), Seal(1)], {1: RE}),
        ],
    ),
    Case(
        "a turn longer than max_turn ends anyway and is not continued",
        [
            (Frames("#" * 31), [BeginTurn(1, 0, 0, None)], {1: L}),
            (Frames("#"), [end(1, 32, 32, Rule.MAX_TURN, 0), StartReply(1), Seal(1)], {1: RE}),
            # the babble goes on: a new turn, the first reply (never heard) is dropped
            (
                Frames("##"),
                [CancelReply(1, CancelReason.UNHEARD), BeginTurn(2, 32 * F, 32 * F, None)],
                {1: Phase.INTERRUPTED, 2: L},
            ),
        ],
        make=lambda: machine(VADConfig(min_speech_ms=64, end_silence_ms=96, pre_roll_ms=32, max_turn_s=1.0)),
    ),
    Case(
        "push-to-talk held past max_turn: the turn ends there; nothing more until the key is released",
        [
            (PttDown(), [BeginTurn(1, 0, 0, None)], {1: L}),
            (Frames("#" * 31), [], {1: L}),
            (Frames("#"), [end(1, 32, 32, Rule.MAX_TURN, 0), StartReply(1), Seal(1)], {1: RE}),
            (Frames("#" * 10), [], {1: RE}),  # still held: the babble starts no new turn
            (PttUp(), [], {1: RE}),
        ],
        make=lambda: machine(VADConfig(min_speech_ms=64, end_silence_ms=96, pre_roll_ms=32, max_turn_s=1.0)),
    ),
    Case(
        "continuation off: speech before the reply is heard cancels it and starts a new turn",
        [
            *ASK,
            *answered(),
            (
                Frames("##"),
                [CancelReply(1, CancelReason.UNHEARD), BeginTurn(2, 5 * F, 5 * F, None), Seal(1)],
                {1: Phase.INTERRUPTED, 2: L},
            ),
        ],
        make=lambda: machine(
            turn=TurnConfig(unsure_silence_ms=192, incomplete_silence_ms=320, continuation=False)
        ),
    ),
    Case(
        "barge-in off: speech over the reply does not pause it; the next turn supersedes it",
        [
            *ASK,
            *answered(),
            (Audible(1), [], {1: AU}),
            (Frames("...."), [Seal(1)], {1: AU}),
            (Frames("##."), [BeginTurn(2, 9 * F, 8 * F, 1), Speculate(2, 11 * F)], {1: AU, 2: MF}),
            (
                Frames("." * 9),
                [
                    end(2, 11, 21, Rule.NO_VERDICT, 320),
                    CancelReply(1, CancelReason.SUPERSEDED),
                    StartReply(2),
                ],
                {1: Phase.INTERRUPTED, 2: RE},
            ),
        ],
        make=lambda: machine(barge=BargeInConfig(enabled=False)),
    ),
    Case(
        "no words: nothing to answer",
        [*ASK, *answered(), (Heard(1, ""), [Dismiss(1, None)], {1: RE}), (Finished(1), [Seal(1)], {})],
    ),
    Case(
        "words: answered",
        [*ASK, *answered(), (Heard(1, "what time is it"), [Answer(1, None)], {1: RE})],
    ),
    Case(
        "the client clears its input while the user speaks: the turn is dropped",
        [
            (Frames("##"), [BeginTurn(1, 0, 0, None)], {1: L}),
            (Clear(), [DropTurn(1)], {}),
            (Frames("#"), [], {}),  # the same speech is a new run: it must be long enough again
            (Frames("#"), [BeginTurn(2, 2 * F, 2 * F, None)], {2: L}),
        ],
    ),
    Case(
        "a clear while the user's speech pauses a reply drops the turn and lets the reply go on",
        [
            *ASK,
            *answered(),
            (Audible(1), [], {1: AU}),
            (Frames("...."), [Seal(1)], {1: AU}),
            (Frames("##"), [PauseReply(1, 9 * FRAME_NS), BeginTurn(2, 9 * F, 8 * F, 1)], {1: PA, 2: L}),
            (Clear(), [DropTurn(2), ResumeReply(1, InterruptionKind.NO_WORDS)], {1: AU}),  # none else would
            (Frames("......"), [], {1: AU}),
        ],
    ),
    Case(
        "a clear during a pause drops the turn and its speculation",
        [*ASK, (Clear(), [DropTurn(1)], {}), (Frames("...."), [], {}), (Clear(), [], {})],
    ),
    Case(
        "a commit with the VAD on ends the user's turn now; it is not continued",
        [
            (Frames("##"), [BeginTurn(1, 0, 0, None)], {1: L}),
            (Commit(), [end(1, 2, 2, Rule.COMMIT, 0), StartReply(1), Seal(1)], {1: RE}),
            (
                Frames("##"),
                [CancelReply(1, CancelReason.UNHEARD), BeginTurn(2, 2 * F, 2 * F, None)],
                {1: Phase.INTERRUPTED, 2: L},
            ),
            (Commit(), [end(2, 4, 4, Rule.COMMIT, 0), StartReply(2), Seal(2)], {1: Phase.INTERRUPTED, 2: RE}),
            (Commit(), [], {1: Phase.INTERRUPTED, 2: RE}),  # nothing left to commit
        ],
    ),
    Case(
        "manual detection: the input since the last commit is a turn; speech decides nothing",
        [
            (Configure(MANUAL), [], {}),
            (Frames("."), [BeginTurn(1, 0, 0, None)], {1: L}),
            (Frames("##...##........."), [], {1: L}),  # pauses and silence end nothing
            (Commit(), [end(1, 17, 17, Rule.COMMIT, 0), StartReply(1), Seal(1)], {1: RE}),
            (Heard(1, "what time is it"), [Keep(1, None)], {1: RE}),  # kept, not answered
            (Finished(1), [], {}),
            (Frames("#"), [BeginTurn(2, 17 * F, 17 * F, None)], {2: L}),
            (Clear(), [DropTurn(2)], {}),
            (Frames("#"), [BeginTurn(3, 18 * F, 18 * F, None)], {3: L}),
        ],
    ),
    Case(
        "manual detection: speech over an audible reply does not interrupt it",
        [
            (Configure(MANUAL), [], {}),
            (Respond(), [BeginReply(1), StartReply(1)], {1: RE}),
            (Audible(1), [], {1: AU}),
            (Frames("#####"), [BeginTurn(2, 0, 0, None)], {1: AU, 2: L}),
            (Frames("#" * 10), [], {1: AU, 2: L}),
            (Cancel(1), [CancelReply(1, CancelReason.CLIENT)], {1: Phase.INTERRUPTED, 2: L}),
            (Finished(1), [], {2: L}),
        ],
    ),
    Case(
        "manual detection: a turn longer than max_turn is committed anyway",
        [
            (Configure(MANUAL, vad=LONG_TURNS), [], {}),
            (Frames("#" * 31), [BeginTurn(1, 0, 0, None)], {1: L}),
            (Frames("#"), [end(1, 32, 32, Rule.MAX_TURN, 0), StartReply(1), Seal(1)], {1: RE}),
            (Frames("#"), [BeginTurn(2, 32 * F, 32 * F, None)], {1: RE, 2: L}),
        ],
        make=lambda: machine(LONG_TURNS),
    ),
    Case(
        "changing who detects turns drops the turn in progress; back to the VAD",
        [
            (Frames("##"), [BeginTurn(1, 0, 0, None)], {1: L}),
            (Configure(MANUAL), [DropTurn(1)], {}),
            (Frames("."), [BeginTurn(2, 2 * F, 2 * F, None)], {2: L}),
            (Configure(TurnOptions()), [DropTurn(2)], {}),
            (Frames(".."), [], {}),
            (Frames("##"), [BeginTurn(3, 5 * F, 4 * F, None)], {3: L}),
        ],
    ),
    Case(
        "auto replies off: the words are kept; spoken over a reply they still interrupt it",
        [
            (Configure(TurnOptions(auto_reply=False)), [], {}),
            *ASK,
            (Words(Cue.NEUTRAL), [], {1: MF}),  # no prefetch: no reply is to come
            (Sound(0.9), [], {1: MF}),
            (Frames(".."), [end(1, 2, 5, Rule.COMPLETE, 96), StartReply(1)], {1: RE}),
            (Heard(1, "tell me a story"), [Keep(1, None)], {1: RE}),
            (Finished(1), [Seal(1)], {}),
            (Respond(), [BeginReply(2), StartReply(2)], {2: RE}),
            (Audible(2), [], {2: AU}),
            (Frames("##"), [PauseReply(2, 5 * FRAME_NS), BeginTurn(3, 5 * F, 5 * F, 2)], {2: PA, 3: L}),
            (Frames("."), [Speculate(3, 7 * F)], {2: PA, 3: MF}),
            (Frames("." * 9), [end(3, 7, 17, Rule.NO_VERDICT, 320), StartReply(3)], {2: PA, 3: RE}),
            (
                Heard(3, "stop please"),
                [CancelReply(2, CancelReason.WORDS, True), Keep(3, InterruptionKind.WORDS)],
                {2: Phase.INTERRUPTED, 3: RE},
            ),
        ],
    ),
    Case(
        "a reply asked for while the user speaks, paused by their speech: their words cancel it",
        [
            *ASKED_MID_TURN,
            (
                Heard(1, "what time is it"),
                [CancelReply(2, CancelReason.WORDS, True), Answer(1, InterruptionKind.WORDS)],
                {1: RE, 2: Phase.INTERRUPTED},
            ),
        ],
    ),
    Case(
        "... no words (a cough) resume it, and are not answered",
        [
            *ASKED_MID_TURN,
            (
                Heard(1, ""),
                [ResumeReply(2, InterruptionKind.NO_WORDS), Dismiss(1, InterruptionKind.NO_WORDS)],
                {1: RE, 2: AU},
            ),
        ],
    ),
    Case(
        "a reply asked for while the user speaks, and not spoken over, yields to the turn's answer",
        [
            (Frames("##"), [BeginTurn(1, 0, 0, None)], {1: L}),
            (Respond(), [BeginReply(2), StartReply(2)], {1: L, 2: RE}),
            (Frames("."), [Speculate(1, 2 * F)], {1: MF, 2: RE}),
            (Words(Cue.NEUTRAL), [Prefetch(1)], {1: MF, 2: RE}),
            (Sound(0.9), [], {1: MF, 2: RE}),
            (
                Frames("..."),
                [
                    end(1, 2, 5, Rule.COMPLETE, 96),
                    CancelReply(2, CancelReason.SUPERSEDED),
                    StartReply(1),
                ],
                {1: RE, 2: Phase.INTERRUPTED},
            ),
        ],
    ),
    Case(
        "... and so does one asked for before the turn's words came, if they are answered",
        [
            *ASK,
            *answered(),
            (Respond(), [BeginReply(2), StartReply(2)], {1: RE, 2: RE}),
            (
                Heard(1, "what time is it"),
                [CancelReply(2, CancelReason.SUPERSEDED), Answer(1, None)],
                {1: RE, 2: Phase.INTERRUPTED},
            ),
        ],
    ),
    Case(
        "... but not if the turn had no words (it plays), nor with auto replies off (the client answers)",
        [
            *ASK,
            *answered(),
            (Respond(), [BeginReply(2), StartReply(2)], {1: RE, 2: RE}),
            (Heard(1, ""), [Dismiss(1, None)], {1: RE, 2: RE}),
            (Finished(1), [Seal(1)], {2: RE}),
            (Configure(TurnOptions(auto_reply=False)), [], {2: RE}),
            (
                Frames("##"),
                [CancelReply(2, CancelReason.UNHEARD), BeginTurn(3, 5 * F, 5 * F, None)],
                {2: Phase.INTERRUPTED, 3: L},
            ),
            (Finished(2), [], {3: L}),
            (Respond(), [BeginReply(4), StartReply(4)], {3: L, 4: RE}),
            (Frames("."), [Speculate(3, 7 * F)], {3: MF, 4: RE}),
            (Words(Cue.NEUTRAL), [], {3: MF, 4: RE}),  # no prefetch: no reply is to come
            (Sound(0.9), [], {3: MF, 4: RE}),
            (Frames(".."), [end(3, 7, 10, Rule.COMPLETE, 96), StartReply(3)], {3: RE, 4: RE}),
            (Heard(3, "what time is it"), [Keep(3, None)], {3: RE, 4: RE}),
        ],
    ),
    Case(
        "speech after a reply was asked for goes on with the user's own turn, not that reply",
        [
            *ASK,
            *answered(),
            (Respond(), [BeginReply(2), StartReply(2)], {1: RE, 2: RE}),
            (
                Frames("##"),  # the voice holds the turn's reply back, and the one asked for behind it
                [
                    held_from(5),
                    HoldReply(2, True),
                    ContinueTurn(1, 5 * F),
                    HoldReply(1, False),
                    HoldReply(2, False),
                ],
                {1: L, 2: RE},
            ),
        ],
    ),
    Case(
        "a reply asked for while another plays waits for it to end (one reply has the floor)",
        [
            (Respond(), [BeginReply(1), StartReply(1)], {1: RE}),
            (Audible(1), [], {1: AU}),
            (Respond(), [BeginReply(2), HoldReply(2, True), StartReply(2)], {1: AU, 2: RE}),
            (Respond(), [BeginReply(3), HoldReply(3, True), StartReply(3)], {1: AU, 2: RE, 3: RE}),
            (Frames("...."), [], {1: AU, 2: RE, 3: RE}),  # time passes: still held
            (Finished(1), [HoldReply(2, False)], {2: RE, 3: RE}),  # the next one, and only it
            (Audible(2), [], {2: AU, 3: RE}),
            (Finished(2), [HoldReply(3, False)], {3: RE}),
            (Audible(3), [], {3: AU}),
        ],
    ),
    Case(
        "a reply asked for once the user's words are answered waits for the answer",
        [
            *ASK,
            *answered(),
            (Heard(1, "what time is it"), [Answer(1, None)], {1: RE}),
            (Respond(), [BeginReply(2), HoldReply(2, True), StartReply(2)], {1: RE, 2: RE}),
            (Audible(1), [], {1: AU, 2: RE}),
            (Finished(1), [Seal(1), HoldReply(2, False)], {2: RE}),
        ],
    ),
    Case(
        "speech over a reply with another waiting: the one heard is paused, the waiting one keeps waiting",
        [*WAITING_OVER, (Frames("."), [Speculate(3, 2 * F)], {1: PA, 2: RE, 3: MF})],
    ),
    Case(
        "... the words cut the one heard and the one waiting behind it (nothing of it was sent)",
        [
            *WAITING_OVER_ENDED,
            (
                Heard(3, "Stop."),
                [
                    CancelReply(1, CancelReason.WORDS, True),
                    CancelReply(2, CancelReason.UNHEARD),
                    Dismiss(3, InterruptionKind.WORDS),
                ],
                {1: Phase.INTERRUPTED, 2: Phase.INTERRUPTED, 3: RE},
            ),
            (Finished(1), [HoldReply(2, False)], {2: Phase.INTERRUPTED, 3: RE}),  # nothing to send
        ],
    ),
    Case(
        "... a cough: the one heard resumes, and the one waiting is heard after it (it was cancelled before)",
        [
            *WAITING_OVER_ENDED,
            (
                Heard(3, ""),
                [ResumeReply(1, InterruptionKind.NO_WORDS), Dismiss(3, InterruptionKind.NO_WORDS)],
                {1: AU, 2: RE, 3: RE},
            ),
            (Finished(3), [Seal(3)], {1: AU, 2: RE}),
            (Frames("...."), [], {1: AU, 2: RE}),  # still waiting for the floor
            (Finished(1), [HoldReply(2, False)], {2: RE}),
            (Audible(2), [], {2: AU}),
        ],
    ),
    Case(
        "... the client cancels the one paused: the one waiting goes with it, not over the speaker",
        [
            *WAITING_OVER,
            (
                Cancel(1),
                [CancelReply(1, CancelReason.CLIENT), CancelReply(2, CancelReason.UNHEARD)],
                {1: Phase.INTERRUPTED, 2: Phase.INTERRUPTED, 3: L},
            ),
        ],
    ),
    Case(
        "a reply asked for behind a paused one goes once the pause resolves",
        [
            (Configure(TurnOptions(auto_reply=False)), [], {}),
            (Respond(), [BeginReply(1), StartReply(1)], {1: RE}),
            (Audible(1), [], {1: AU}),
            (Frames("##"), [PauseReply(1, 0), BeginTurn(2, 0, 0, 1)], {1: PA, 2: L}),
            (Respond(), [BeginReply(3), HoldReply(3, True), StartReply(3)], {1: PA, 2: L, 3: RE}),
            (Frames("."), [Speculate(2, 2 * F)], {1: PA, 2: MF, 3: RE}),
            (Frames("." * 9), [end(2, 2, 12, Rule.NO_VERDICT, 320), StartReply(2)], {1: PA, 2: RE, 3: RE}),
            (
                Heard(2, "wait a moment"),
                [CancelReply(1, CancelReason.WORDS, True), Keep(2, InterruptionKind.WORDS)],
                {1: Phase.INTERRUPTED, 2: RE, 3: RE},
            ),
            (Finished(1), [HoldReply(3, False)], {2: RE, 3: RE}),
        ],
    ),
    Case(
        "speech that goes on with the user's turn pauses a response asked for: the turn's words decide",
        [
            (Configure(TurnOptions(auto_reply=False)), [], {}),
            *ASK,
            (Respond(), [BeginReply(2), StartReply(2)], {1: MF, 2: RE}),
            (Words(Cue.NEUTRAL), [], {1: MF, 2: RE}),
            (Sound(0.9), [], {1: MF, 2: RE}),
            (Frames(".."), [end(1, 2, 5, Rule.COMPLETE, 96), StartReply(1)], {1: RE, 2: RE}),
            (Heard(1, "tell me a story"), [Keep(1, None)], {1: RE, 2: RE}),
            (Audible(2), [], {1: RE, 2: AU}),
            (Frames("#"), [held_from(5)], {1: RE, 2: AU}),
            (
                Frames("#"),  # the same speech pauses the response and continues turn 1
                [PauseReply(2, 5 * FRAME_NS), ContinueTurn(1, 5 * F), HoldReply(1, False)],
                {1: L, 2: PA},
            ),
            (Frames("."), [Speculate(1, 7 * F)], {1: MF, 2: PA}),
            (Frames("." * 9), [end(1, 7, 17, Rule.NO_VERDICT, 320), StartReply(1)], {1: RE, 2: PA}),
            (  # before, the continued turn was not taken as said over the response: it stayed paused
                Heard(1, "tell me a story about a cat"),
                [CancelReply(2, CancelReason.WORDS, True), Keep(1, InterruptionKind.WORDS)],
                {1: RE, 2: Phase.INTERRUPTED},
            ),
        ],
    ),
    Case(
        "a reply asked for directly: speech before it is audible cancels it (never continued)",
        [
            (Respond(), [BeginReply(1), StartReply(1)], {1: RE}),
            (
                Frames("##"),
                [CancelReply(1, CancelReason.UNHEARD), BeginTurn(2, 0, 0, None)],
                {1: Phase.INTERRUPTED, 2: L},
            ),
            (Cancel(1), [], {1: Phase.INTERRUPTED, 2: L}),  # already cancelled
        ],
    ),
    Case(
        "the client cancels a reply that plays, and one being prepared",
        [
            *ASK,
            *answered(),
            (Audible(1), [], {1: AU}),
            (Cancel(1), [CancelReply(1, CancelReason.CLIENT)], {1: Phase.INTERRUPTED}),
            (Finished(1), [Seal(1)], {}),
            (Respond(), [BeginReply(2), StartReply(2)], {2: RE}),
            (Cancel(2), [CancelReply(2, CancelReason.CLIENT)], {2: Phase.INTERRUPTED}),
            (Cancel(7), [], {2: Phase.INTERRUPTED}),
        ],
    ),
    Case(
        "late news of an old reply changes nothing",
        [
            *ASK,
            *answered(),
            (Finished(1), [Seal(1)], {}),
            (Finished(1), [], {}),
            (Audible(1), [], {}),
            (Heard(1, "hello"), [], {}),
            (Interrupt(), [], {}),
            (PttUp(), [], {}),
        ],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_script(case: Case) -> None:
    d = Driver(case.make())
    for i, (step, expected, phases) in enumerate(case.script):
        got = d.apply(step)
        assert same(expected, got), f"step {i} {step}: expected {expected}, got {got}"
        live = {tid: d.m.phase(tid) for tid in d.m.live}
        assert live == phases, f"step {i} {step}: phases {live}"


def test_every_phase_but_done_has_a_way_out_and_done_has_none() -> None:
    exits = {phase for phase, _ in TRANSITIONS}
    assert exits == set(Phase) - {Phase.DONE}
    assert Phase.DONE in TRANSITIONS.values()


def test_a_transition_not_in_the_table_is_a_bug() -> None:
    with pytest.raises(TurnStateError):
        TurnState(1, Phase.DONE).move(Step.CONTINUE)


def test_audible_is_the_latest_reply_the_listener_hears() -> None:
    d = Driver(machine())
    for step, _, _ in [*ASK, *answered()]:
        d.apply(step)
    assert d.m.audible is None  # being prepared: nothing heard yet
    d.apply(Audible(1))
    assert d.m.audible == 1
    d.apply(Frames("...."))
    d.apply(Frames("##"))
    assert d.m.audible == 1 and d.m.spoken_over(2) == 1


def test_the_scripts_take_every_transition_of_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: set[tuple[Phase, Step]] = set()
    move = TurnState.move

    def recording(self: TurnState, step: Step) -> None:
        taken.add((self.phase, step))
        move(self, step)

    monkeypatch.setattr(TurnState, "move", recording)
    for case in CASES:
        d = Driver(case.make())
        for step, _, _ in case.script:
            d.apply(step)
    assert taken == set(TRANSITIONS), f"not exercised: {set(TRANSITIONS) - taken}"


def test_a_false_interruption_is_told_by_its_reason_not_its_text() -> None:
    false = {r for r in CancelReason if r.false_interruption}
    assert false == {
        CancelReason.STOPPED_BY_NO_WORDS,
        CancelReason.STOPPED_BY_BACKCHANNEL,
        CancelReason.STOPPED_BY_ECHO,
    }


def test_transcribed_returns_its_verdict_among_its_commands() -> None:
    d = Driver(machine())
    for step, _, _ in [*ASK, *answered()]:
        d.apply(step)
    heard = d.m.transcribed(1, "What time is it?")
    assert heard.verdict == Answer(1, None) and heard.commands == (heard.verdict,)
    assert d.m.transcribed(7, "who?") == Transcribed((), None)  # no such turn waiting for words
    silent = Driver(machine())
    for step, _, _ in [*ASK, *answered()]:
        silent.apply(step)
    nothing = silent.m.transcribed(1, "")
    assert nothing.verdict == Dismiss(1, None) and nothing.commands == (nothing.verdict,)


def test_the_machine_answers_what_the_runtime_kept_a_copy_of() -> None:
    """Which turn takes the input and which replies run: the machine's answers equal the
    bookkeeping the runtime kept from its commands before it asked the machine."""
    for case in CASES:
        d = Driver(case.make())
        capture: int | None = None
        replying: set[int] = set()
        for i, (step, _, _) in enumerate(case.script):
            for c in d.apply(step):
                match c:
                    case BeginTurn(turn_id=tid):
                        capture = tid
                    case ContinueTurn(turn_id=tid):
                        capture = tid
                        replying.discard(tid)
                    case Seal(turn_id=tid) | DropTurn(turn_id=tid) if capture == tid:
                        capture = None
                    case StartReply(turn_id=tid):
                        replying.add(tid)
            if isinstance(step, Finished):
                replying.discard(step.turn)
            where = f"{case.name} step {i} {step}"
            assert d.m.capturing == capture, where
            assert d.m.replying == sorted(replying), where


def test_a_voice_holds_the_first_audio_400_ms_at_most_or_twice_the_speech_the_vad_needs() -> None:
    c = Continuation(TURN, sample_rate_hz=RATE, time_of=t_of)
    t = TurnState(1, phase=Phase.REPLYING, speech_end_sample=0)
    onset = 10 * F

    def at(ms: int) -> int:
        return t_of(onset) + ms * 1_000_000

    assert c.holds(t, at(399), onset, 150) and not c.holds(t, at(400), onset, 150)
    assert c.holds(t, at(599), onset, 300) and not c.holds(t, at(600), onset, 300)  # a slower VAD
    assert c.hold_until(onset, 150) == at(400) and c.hold_until(onset, 300) == at(600)
    assert c.hold_until(None, 150) is None
    assert not c.holds(t, at(10), None, 150)  # no voice
    t.phase = Phase.AUDIBLE  # audio is out: speech over it is not this hold's business
    assert not c.holds(t, at(10), onset, 150)
