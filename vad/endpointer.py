"""End-of-turn detection: a pure state machine over per-frame speech probabilities.

Feed it one probability per VAD frame (:meth:`Endpointer.update`); it returns the
actions that frame caused. No clock, no asyncio, no audio: positions are sample
indices into the stream, counted from the first frame fed (or the last
:meth:`Endpointer.reset`). The runtime maps them to audio and to timestamps.

States and transitions (everything that affects the state machine is in
:meth:`Endpointer.update` and :meth:`Endpointer.evidence`)::

    IDLE ──p>=threshold──> CANDIDATE ──voiced time >= min_speech──> SPEECH   (SpeechStarted)
      ^                       │ p<neg_threshold (run discarded, nothing emitted)
      └───────────────────────┘
    SPEECH ──p<neg_threshold──> PAUSE                                        (PauseStarted)
    PAUSE  ──p>=threshold──> SPEECH                                          (SpeechResumed)
    PAUSE  ──silence since speech end >= the policy's wait──> IDLE           (EndOfTurn)
    SPEECH, PAUSE ──turn longer than max_turn──> IDLE                        (EndOfTurn, MAX_TURN)

Hysteresis: a frame is *voiced* when ``p >= threshold``. Once a run has started
(CANDIDATE or SPEECH), frames with ``p >= neg_threshold`` keep it alive, but only
voiced frames count towards ``min_speech_ms``. In PAUSE a frame must be voiced
again to resume; frames between the two thresholds count as silence there.

How long a pause must last is the end-of-turn policy's answer
(:class:`vad.end_of_turn.EndOfTurnPolicy`): without one, ``end_silence_ms`` (rule
SILENCE); with one, the short, medium or long wait for the evidence about this pause
-- the words of its speculative transcript and the audio model's P(complete) --
which the runtime hands in with :meth:`Endpointer.evidence` as it arrives. Evidence
is tagged with the pause's ``speech_end_sample``, so a late answer about an earlier
pause of the turn is ignored.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vad.end_of_turn import Cue, EndOfTurnPolicy, Evidence, Rule
from voice_pipeline.errors import ConfigError

if TYPE_CHECKING:
    from voice_pipeline.config import VADConfig


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    """A user turn began."""

    #: first sample of the first voiced frame of this speech run
    onset_sample: int
    #: onset minus pre-roll, clamped to >= 0 and >= the previous turn's ``decided_sample``
    start_sample: int
    #: end of the frame at which ``min_speech_ms`` of voiced time was reached
    decided_sample: int


@dataclass(frozen=True, slots=True)
class PauseStarted:
    """First unvoiced frame after speech (e.g. to start a speculative final ASR decode)."""

    #: end of the last voiced frame
    speech_end_sample: int


@dataclass(frozen=True, slots=True)
class SpeechResumed:
    """Speech came back before the end-of-turn silence elapsed."""

    #: first sample of the frame in which speech resumed
    sample: int
    #: the silence it broke, from the end of the last voiced frame (ms)
    silence_ms: int = 0


@dataclass(frozen=True, slots=True)
class EndOfTurn:
    """The user's turn is over."""

    #: true end of speech: end of the last voiced frame
    speech_end_sample: int
    #: end of the frame (or evidence) at which the turn was decided over
    decided_sample: int
    #: why it ended
    rule: Rule = Rule.SILENCE
    #: what was known about the last pause when it ended
    evidence: Evidence = field(default_factory=Evidence)
    #: the silence the policy required (ms; 0 when it did not end on silence)
    wait_ms: int = 0
    #: of it, the speaker's patience (:meth:`EndOfTurnPolicy.waits`)
    patience_ms: int = 0


EndpointAction = SpeechStarted | PauseStarted | SpeechResumed | EndOfTurn


class _State(enum.Enum):
    IDLE = enum.auto()
    CANDIDATE = enum.auto()  # a voiced run that is not yet long enough to be a turn
    SPEECH = enum.auto()  # in a turn, speaking
    PAUSE = enum.auto()  # in a turn, silent for less than the policy's wait


def _ms_to_samples(ms: int, sample_rate_hz: int) -> int:
    return ms * sample_rate_hz // 1000


class Endpointer:
    """Turns per-frame speech probabilities into turn boundaries. One per session."""

    def __init__(
        self,
        cfg: VADConfig,
        sample_rate_hz: int,
        frame_samples: int,
        policy: EndOfTurnPolicy | None = None,
    ) -> None:
        """``policy``: the semantic end-of-turn policy; None = silence alone (``end_silence_ms``)."""
        if sample_rate_hz <= 0 or frame_samples <= 0:
            raise ConfigError("vad: sample rate and frame size must be positive")
        self.sample_rate_hz = sample_rate_hz
        self.frame_samples = frame_samples
        self.reconfigure(cfg, policy)
        self.reset()

    def reconfigure(self, cfg: VADConfig, policy: EndOfTurnPolicy | None) -> None:
        """New thresholds, pre-roll, waits and policy from the next frame on; the position
        and the run in progress are kept (a realtime client's ``session.update``)."""
        rate = self.sample_rate_hz
        self._policy = policy
        self._max_turn = round(cfg.max_turn_s * rate)
        self._threshold = cfg.threshold
        self._neg_threshold = cfg.neg_threshold
        self._min_speech = _ms_to_samples(cfg.min_speech_ms, rate)
        self._end_silence_ms = cfg.end_silence_ms
        self._pre_roll = _ms_to_samples(cfg.pre_roll_ms, rate)

    def reset(self) -> None:
        """Forget everything, including the position (the next frame starts at sample 0)."""
        self._state = _State.IDLE
        self._position = 0
        self._onset = 0  # first sample of the current run
        self._voiced = 0  # voiced samples in the current CANDIDATE run
        self._speech_end = 0  # end of the last voiced frame of the current turn
        self._turn_onset = 0  # onset of the current turn (for max_turn)
        self._previous_turn_end = 0  # decided_sample of the last EndOfTurn
        self._evidence = Evidence()  # about the current pause

    @property
    def position(self) -> int:
        """Samples consumed so far (frames fed x frame_samples)."""
        return self._position

    @property
    def in_turn(self) -> bool:
        """True between SpeechStarted and EndOfTurn."""
        return self._state in (_State.SPEECH, _State.PAUSE)

    @property
    def pending_onset(self) -> int | None:
        """Onset sample of a voiced run that may still become a turn (CANDIDATE), else None."""
        return self._onset if self._state is _State.CANDIDATE else None

    @property
    def speech_end_sample(self) -> int | None:
        """End of the last voiced frame of the current turn; None outside a turn."""
        return self._speech_end if self.in_turn else None

    def update(self, probability: float) -> list[EndpointAction]:
        """Consume one frame's speech probability; return the actions it caused."""
        frame_start = self._position
        frame_end = frame_start + self.frame_samples
        self._position = frame_end
        voiced = probability >= self._threshold
        alive = probability >= self._neg_threshold
        actions: list[EndpointAction] = []

        match self._state:
            case _State.IDLE:
                if voiced:
                    self._onset = frame_start
                    self._voiced = 0
                    self._state = _State.CANDIDATE
                    self._grow_candidate(frame_end, actions)
            case _State.CANDIDATE:
                if voiced:
                    self._grow_candidate(frame_end, actions)
                elif not alive:
                    self._state = _State.IDLE  # too short: discarded silently
            case _State.SPEECH:
                if alive:
                    self._speech_end = frame_end
                    self._check_max_turn(frame_end, actions)
                else:
                    self._state = _State.PAUSE
                    self._evidence = Evidence()
                    actions.append(PauseStarted(self._speech_end))
                    self._check_end(frame_end, actions)
            case _State.PAUSE:
                if voiced:
                    self._state = _State.SPEECH
                    silence_ms = (frame_start - self._speech_end) * 1000 // self.sample_rate_hz
                    self._speech_end = frame_end
                    actions.append(SpeechResumed(frame_start, silence_ms))
                    self._check_max_turn(frame_end, actions)
                else:
                    self._check_end(frame_end, actions)
        return actions

    def evidence(
        self,
        speech_end_sample: int,
        *,
        cue: Cue | None = None,
        p_complete: float | None = None,
        no_sound: bool = False,
    ) -> list[EndpointAction]:
        """What the words (``cue``) or the sound (``p_complete``; ``no_sound``: the model
        failed or was not asked) say about the pause that began after ``speech_end_sample``. Ends the
        turn at once if the silence so far is already enough for the new evidence; ignored
        unless that pause is still running."""
        if self._state is not _State.PAUSE or speech_end_sample != self._speech_end:
            return []
        ev = self._evidence
        self._evidence = Evidence(
            cue=ev.cue if cue is None else cue,
            p_complete=ev.p_complete if p_complete is None else p_complete,
            sound=ev.sound and not no_sound,
        )
        actions: list[EndpointAction] = []
        self._check_end(self._position, actions)
        return actions

    def wait_ms(self) -> tuple[int, int, Rule]:
        """The silence the current pause needs before the turn ends, how much of it is the
        speaker's patience, and the rule."""
        if self._policy is None:
            return self._end_silence_ms, 0, Rule.SILENCE
        return self._policy.waits(self._evidence)

    def begin(self, frames_before: int) -> list[EndpointAction]:
        """Start a turn now, with its onset ``frames_before`` frames before the next frame,
        however little of it was voiced so far: speech that paused a reply must be heard out
        (its words decide). Nothing while a turn is open."""
        if self.in_turn:
            return []
        onset = max(self._position - frames_before * self.frame_samples, 0, self._previous_turn_end)
        return [self._start(onset, self._position)]

    def abandon(self) -> None:
        """Leave the current turn without an action (push-to-talk took over the turn)."""
        if self._state is not _State.IDLE:
            self._previous_turn_end = self._position
        self._state = _State.IDLE

    def _grow_candidate(self, frame_end: int, actions: list[EndpointAction]) -> None:
        self._voiced += self.frame_samples
        if self._voiced >= self._min_speech:
            actions.append(self._start(self._onset, frame_end))

    def _start(self, onset: int, decided: int) -> SpeechStarted:
        """A turn begins at ``onset``, decided at ``decided`` (its speech so far ends there)."""
        start = max(onset - self._pre_roll, 0, self._previous_turn_end)
        self._state, self._onset, self._turn_onset, self._speech_end = _State.SPEECH, onset, onset, decided
        return SpeechStarted(onset, start, decided)

    def _check_end(self, now: int, actions: list[EndpointAction]) -> None:
        ms, patience, rule = self.wait_ms()
        if now - self._speech_end >= _ms_to_samples(ms, self.sample_rate_hz):
            self._end(now, rule, actions, ms, patience)
        else:
            self._check_max_turn(now, actions)

    def _check_max_turn(self, now: int, actions: list[EndpointAction]) -> None:
        if self._max_turn > 0 and now - self._turn_onset >= self._max_turn:
            self._end(now, Rule.MAX_TURN, actions, 0)

    def _end(
        self, now: int, rule: Rule, actions: list[EndpointAction], wait_ms: int, patience: int = 0
    ) -> None:
        self._state = _State.IDLE
        self._previous_turn_end = now
        actions.append(EndOfTurn(self._speech_end, now, rule, self._evidence, wait_ms, patience))
