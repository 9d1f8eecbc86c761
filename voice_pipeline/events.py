"""Typed events a session emits to its transport (and tests, and the CLI).

Every event is a frozen dataclass carrying the ``turn_id`` it belongs to and
``t_ns``, a ``time.monotonic_ns()`` timestamp. Events are named in the past
tense; dispatch on the :data:`Event` union with ``match``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from voice_pipeline.records import TurnRecord


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    turn_id: int
    t_ns: int


@dataclass(frozen=True, slots=True)
class EndpointDetected:
    turn_id: int
    t_ns: int
    #: monotonic time of the true end of speech (last voiced frame)
    speech_end_ns: int


@dataclass(frozen=True, slots=True)
class TurnContinued:
    """The user went on speaking after the end of this turn, before its reply was heard:
    the reply so far (text and audio) is dropped -- transports flush it -- and the turn
    is open again. It ends with a new ``EndpointDetected`` and a transcript of the whole
    utterance, both parts."""

    turn_id: int
    t_ns: int


@dataclass(frozen=True, slots=True)
class TranscriptPartial:
    turn_id: int
    t_ns: int
    committed: str
    tentative: str


@dataclass(frozen=True, slots=True)
class TranscriptFinalized:
    turn_id: int
    t_ns: int
    text: str


@dataclass(frozen=True, slots=True)
class AssistantTextStreamed:
    """A new piece of the assistant's reply text (as the LLM streams it)."""

    turn_id: int
    t_ns: int
    text: str


@dataclass(frozen=True, slots=True)
class ReplyPaused:
    """User speech over the reply: transports must flush queued audio now. The reply
    resumes (:class:`ReplyResumed`) if it was only a backchannel, else it is interrupted."""

    turn_id: int
    t_ns: int


@dataclass(frozen=True, slots=True)
class ReplyResumed:
    turn_id: int
    t_ns: int
    reason: str  # bargein.InterruptionKind of the false interruption


@dataclass(frozen=True, slots=True)
class ReplyInterrupted:
    """The assistant's reply was cut off; transports must flush queued audio now."""

    turn_id: int
    t_ns: int
    reason: str


@dataclass(frozen=True, slots=True)
class BudgetExceeded:
    turn_id: int
    t_ns: int
    stage: str
    duration_ms: float
    budget_ms: float


@dataclass(frozen=True, slots=True)
class TurnCompleted:
    turn_id: int
    t_ns: int
    record: TurnRecord


@dataclass(frozen=True, slots=True)
class TurnFailed:
    """A stage failed during the turn; the session goes on."""

    turn_id: int
    t_ns: int
    stage: str
    message: str
    retryable: bool


Event = (
    SpeechStarted
    | EndpointDetected
    | TurnContinued
    | TranscriptPartial
    | TranscriptFinalized
    | AssistantTextStreamed
    | ReplyPaused
    | ReplyResumed
    | ReplyInterrupted
    | BudgetExceeded
    | TurnCompleted
    | TurnFailed
)
