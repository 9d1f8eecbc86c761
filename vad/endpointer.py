"""End-of-turn detection: a pure state machine over per-frame speech probabilities.

Feed it one probability per VAD frame (:meth:`Endpointer.update`); it returns the
actions that frame caused. No clock, no asyncio, no audio: positions are sample
indices into the stream, counted from the first frame fed (or the last
:meth:`Endpointer.reset`). The runtime maps them to audio and to timestamps.

States and transitions (everything that affects the state machine is in
:meth:`Endpointer.update`)::

    IDLE ──p>=threshold──> CANDIDATE ──voiced time >= min_speech──> SPEECH   (SpeechStarted)
      ^                       │ p<neg_threshold (run discarded, nothing emitted)
      └───────────────────────┘
    SPEECH ──p<neg_threshold──> PAUSE                                        (PauseStarted)
    PAUSE  ──p>=threshold──> SPEECH                                          (SpeechResumed)
    PAUSE  ──silence since speech end >= end_silence──> IDLE                 (EndOfTurn)

Hysteresis: a frame is *voiced* when ``p >= threshold``. Once a run has started
(CANDIDATE or SPEECH), frames with ``p >= neg_threshold`` keep it alive, but only
voiced frames count towards ``min_speech_ms``. In PAUSE a frame must be voiced
again to resume; frames between the two thresholds count as silence there.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

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


@dataclass(frozen=True, slots=True)
class EndOfTurn:
    """The user's turn is over."""

    #: true end of speech: end of the last voiced frame
    speech_end_sample: int
    #: end of the frame at which ``end_silence_ms`` of silence was reached
    decided_sample: int


EndpointAction = SpeechStarted | PauseStarted | SpeechResumed | EndOfTurn


class _State(enum.Enum):
    IDLE = enum.auto()
    CANDIDATE = enum.auto()  # a voiced run that is not yet long enough to be a turn
    SPEECH = enum.auto()  # in a turn, speaking
    PAUSE = enum.auto()  # in a turn, silent for less than end_silence


def _ms_to_samples(ms: int, sample_rate_hz: int) -> int:
    return ms * sample_rate_hz // 1000


class Endpointer:
    """Turns per-frame speech probabilities into turn boundaries. One per session."""

    def __init__(self, cfg: VADConfig, sample_rate_hz: int, frame_samples: int) -> None:
        if sample_rate_hz <= 0 or frame_samples <= 0:
            raise ConfigError("vad: sample rate and frame size must be positive")
        self.sample_rate_hz = sample_rate_hz
        self.frame_samples = frame_samples
        self._threshold = cfg.threshold
        self._neg_threshold = cfg.neg_threshold
        self._min_speech = _ms_to_samples(cfg.min_speech_ms, sample_rate_hz)
        self._end_silence = _ms_to_samples(cfg.end_silence_ms, sample_rate_hz)
        self._pre_roll = _ms_to_samples(cfg.pre_roll_ms, sample_rate_hz)
        self.reset()

    def reset(self) -> None:
        """Forget everything, including the position (the next frame starts at sample 0)."""
        self._state = _State.IDLE
        self._position = 0
        self._onset = 0  # first sample of the current run
        self._voiced = 0  # voiced samples in the current CANDIDATE run
        self._speech_end = 0  # end of the last voiced frame of the current turn
        self._previous_turn_end = 0  # decided_sample of the last EndOfTurn

    @property
    def position(self) -> int:
        """Samples consumed so far (frames fed x frame_samples)."""
        return self._position

    @property
    def in_turn(self) -> bool:
        """True between SpeechStarted and EndOfTurn."""
        return self._state in (_State.SPEECH, _State.PAUSE)

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
                else:
                    self._state = _State.PAUSE
                    actions.append(PauseStarted(self._speech_end))
                    self._check_end(frame_end, actions)
            case _State.PAUSE:
                if voiced:
                    self._state = _State.SPEECH
                    self._speech_end = frame_end
                    actions.append(SpeechResumed(frame_start))
                else:
                    self._check_end(frame_end, actions)
        return actions

    def _grow_candidate(self, frame_end: int, actions: list[EndpointAction]) -> None:
        self._voiced += self.frame_samples
        if self._voiced >= self._min_speech:
            start = max(self._onset - self._pre_roll, 0, self._previous_turn_end)
            self._state = _State.SPEECH
            self._speech_end = frame_end
            actions.append(SpeechStarted(self._onset, start, frame_end))

    def _check_end(self, frame_end: int, actions: list[EndpointAction]) -> None:
        if frame_end - self._speech_end >= self._end_silence:
            self._state = _State.IDLE
            self._previous_turn_end = frame_end
            actions.append(EndOfTurn(self._speech_end, frame_end))
