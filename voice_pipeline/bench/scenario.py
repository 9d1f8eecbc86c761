"""What the simulated callers say, and when (pure: no I/O, no clock).

A :class:`Clip` is one utterance at the protocol's rate with the sample span
of its speech (``onset``/``end``), found on the audio itself, so the bench
knows exactly where each utterance's speech ends once it is on the wire.

:func:`plan_step` draws every caller's script from one seed: which question
each turn asks, which replies are interrupted and how far into the reply
audio. ``interrupt_share`` is exact, not a probability: ``round(share x
sessions x turns)`` replies are interrupted (at most the replies that have a
next turn: the interruption *is* the next turn's speech), chosen at random.
An interrupted turn asks one of the long-answer prompts, so its reply is
still playing when the interruption comes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

#: short questions of common words that tiny.en transcribes well
QUESTIONS: tuple[str, ...] = (
    "What is the capital of France?",
    "How many days are in a week?",
    "What color is the sky?",
    "What do bees make?",
    "How many legs does a spider have?",
    "What is two plus two?",
    "Which animal says moo?",
    "Where does the sun rise?",
)
#: asked by the turns whose reply will be interrupted (long replies)
LONG_PROMPTS: tuple[str, ...] = (
    "Tell me a long story about a brave knight.",
    "Tell me a long story about a little dog.",
    "Tell me a long story about a big ship.",
)
#: spoken over the reply; no pause inside (Piper pauses ~0.35 s at a comma, longer than the
#: server's end-of-turn silence), so it stays one user turn
INTERRUPTION = "Please tell me about the moon instead."

#: the interruption starts this far into the reply audio (uniform, seeded): more than the
#: server's continuation gap (turn.continuation_max_gap_ms, 1500 ms) after the caller's end of
#: speech, and past its grace (as long), so it is a barge-in
INTERRUPT_DELAY_S = (1.6, 2.6)
#: sessions start staggered by up to this much (seeded)
START_SPREAD_S = 1.0

#: a 10 ms frame is speech when its level is above this and within SPEECH_RANGE_DB of the loudest
SPEECH_FLOOR_DBFS = -50.0
SPEECH_RANGE_DB = 30.0
_FRAME_S = 0.01


@dataclass(frozen=True, slots=True)
class Clip:
    """One utterance: mono float32 at ``rate_hz``; speech spans samples [onset, end)."""

    text: str  # what is said (a WAV's file name when it came from --wav-dir)
    samples: NDArray[np.float32]
    rate_hz: int
    onset: int
    end: int
    #: where each pause inside the utterance begins (a sentence said with pauses; empty for
    #: one said in one go): a turn that ends before ``end`` ended while the speaker had more to say
    pauses_at: tuple[int, ...] = ()

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.rate_hz

    @property
    def paused(self) -> bool:
        return bool(self.pauses_at)


def speech_span(samples: NDArray[np.float32], rate_hz: int) -> tuple[int, int] | None:
    """[onset, end) of the speech in ``samples``, at 10 ms resolution: from the first to
    the end of the last 10 ms frame above -50 dBFS and within 30 dB of the loudest frame.
    None when nothing qualifies (silence)."""
    frame = max(1, round(rate_hz * _FRAME_S))
    n = len(samples) // frame
    if n == 0:
        return None
    x = samples[: n * frame].reshape(n, frame).astype(np.float64)
    level = 20.0 * np.log10(np.sqrt(np.mean(x * x, axis=1)) + 1e-9)
    loud = np.flatnonzero(level >= max(SPEECH_FLOOR_DBFS, float(level.max()) - SPEECH_RANGE_DB))
    if loud.size == 0:
        return None
    end = (int(loud[-1]) + 1) * frame
    if end == n * frame:
        end = len(samples)  # the last partial frame belongs to the speech too
    return int(loud[0]) * frame, end


def make_clip(
    text: str, samples: NDArray[np.float32], rate_hz: int, pauses_at: tuple[int, ...] = ()
) -> Clip | None:
    """A clip of ``samples`` (already at ``rate_hz``), or None if it holds no speech."""
    span = speech_span(samples, rate_hz)
    if span is None:
        return None
    pcm = np.ascontiguousarray(samples, dtype=np.float32)
    return Clip(text, pcm, rate_hz, span[0], span[1], pauses_at)


@dataclass(frozen=True, slots=True)
class Speech:
    """The clips a run speaks: questions, long-answer prompts, interruptions, and sentences
    said with pauses inside (``--pauses``)."""

    questions: tuple[Clip, ...]
    long_prompts: tuple[Clip, ...]
    interruptions: tuple[Clip, ...]
    paused: tuple[Clip, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnPlan:
    index: int  # 0-based within the session
    clip: Clip
    #: this turn's speech interrupts the previous turn's reply (it starts during that reply)
    interrupts_previous: bool
    #: interrupt this turn's reply this long after its first audio (None = listen to the end)
    interrupt_after_s: float | None


@dataclass(frozen=True, slots=True)
class SessionPlan:
    session: int  # 0-based
    start_offset_s: float
    turns: tuple[TurnPlan, ...]


def interrupt_count(share: float, sessions: int, turns: int) -> int:
    """Replies to interrupt: ``round(share x sessions x turns)``, at most ``sessions x (turns - 1)``."""
    wanted = round(share * sessions * turns + 1e-9)
    return max(0, min(wanted, sessions * (turns - 1)))


def plan_step(
    speech: Speech, sessions: int, turns: int, interrupt_share: float, seed: int, pauses: float = 0.0
) -> list[SessionPlan]:
    """Every caller's script for one run of ``sessions`` x ``turns``; the same seed gives the same plan.

    ``pauses``: the share of the questions that are sentences said with pauses inside
    (``round(pauses x questions)`` of them, chosen by the seed; none without ``speech.paused``)."""
    rng = random.Random(seed * 1_000_003 + sessions)
    eligible = [(s, t) for s in range(sessions) for t in range(turns - 1)]
    cut = set(rng.sample(eligible, interrupt_count(interrupt_share, sessions, turns)))
    plain = [
        (s, t) for s in range(sessions) for t in range(turns) if (s, t) not in cut and (s, t - 1) not in cut
    ]
    wanted = round(pauses * len(plain) + 1e-9) if speech.paused else 0
    said_paused = set(rng.sample(plain, min(wanted, len(plain))))
    paused = list(speech.paused)
    rng.shuffle(paused)
    plans = []
    for s in range(sessions):
        order = list(speech.questions)
        rng.shuffle(order)
        offset = 0.0 if s == 0 else round(rng.uniform(0.0, START_SPREAD_S), 3)
        script: list[TurnPlan] = []
        for t in range(turns):
            after = (s, t) in cut
            follows = (s, t - 1) in cut
            if follows:
                clip = rng.choice(speech.interruptions)
            elif after and speech.long_prompts:
                clip = rng.choice(speech.long_prompts)
            elif (s, t) in said_paused:
                clip = paused[(s * turns + t) % len(paused)]
            else:
                clip = order[t % len(order)]
            delay = round(rng.uniform(*INTERRUPT_DELAY_S), 3) if after else None
            script.append(TurnPlan(t, clip, follows, delay))
        plans.append(SessionPlan(s, offset, tuple(script)))
    return plans


def sample_time(frame_sent_s: float, frame_end: int, boundary: int, rate_hz: int) -> float:
    """When sample boundary ``boundary`` (an index between samples) was at the microphone.

    The frame holding the samples just before ``frame_end`` was sent at
    ``frame_sent_s``; a paced microphone captures a frame during the frame's
    duration before sending it, so the boundary was ``(frame_end - boundary) /
    rate`` earlier. Used for the end of speech (the end of its last sample) and
    the onset of an interruption (the start of its first sample)."""
    return frame_sent_s - (frame_end - boundary) / rate_hz
