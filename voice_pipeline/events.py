"""Typed events a session emits to its transport (and tests, and the CLI).

Every event is a frozen dataclass carrying the ``turn_id`` it belongs to and
``t_ns``, a ``time.monotonic_ns()`` timestamp. Events are named in the past
tense; dispatch on the :data:`Event` union with ``match``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from voice_pipeline.ledger.records import FailedStage, StageName, TurnRecord
    from voice_pipeline.turntaking.bargein import InterruptionKind
    from voice_pipeline.turntaking.messages import CancelReason


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    turn_id: int
    t_ns: int
    #: where the turn's audio starts (the pre-roll included), in ms of input since the
    #: session started (the realtime protocol's ``audio_start_ms``)
    audio_start_ms: int = 0


@dataclass(frozen=True, slots=True)
class EndpointDetected:
    turn_id: int
    t_ns: int
    #: monotonic time of the true end of speech (last voiced frame)
    speech_end_ns: int
    #: ... in ms of input since the session started (the realtime ``audio_end_ms``)
    audio_end_ms: int = 0


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
class ReplyStarted:
    """The turn is answered: its reply's LLM request starts (or its prefetch is taken)."""

    turn_id: int
    t_ns: int


@dataclass(frozen=True, slots=True)
class ClauseSynthesized:
    """Reply audio goes to the listener next: a clause of ``text`` (``""`` for a fixed
    phrase, the filler or the apology, which are not the reply's words, and for the rest of
    a first clause sent head first, ``tts.head_first``) of ``samples`` at the transport's
    output rate. The audio itself follows through ``play``."""

    turn_id: int
    t_ns: int
    text: str
    samples: int


@dataclass(frozen=True, slots=True)
class ReplyGenerated:
    """The reply is complete: every token generated and all its audio handed to the
    transport (playback may go on). ``token_limit``: it stopped at its token limit;
    ``repeated``: it stopped as it began to repeat itself (voice_pipeline/conversation/repetition.py)."""

    turn_id: int
    t_ns: int
    output_tokens: int
    token_limit: bool
    #: how the engine says the prompt was served (None: it did not say)
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    repeated: bool = False


@dataclass(frozen=True, slots=True)
class AssistantTextStreamed:
    """A new piece of the assistant's reply text (as the LLM streams it)."""

    turn_id: int
    t_ns: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStreamed:
    """New text of a function call the LLM is writing (``index`` tells a reply's calls
    apart; the first event of a call carries its ``call_id`` and ``name``)."""

    turn_id: int
    t_ns: int
    index: int
    call_id: str
    name: str
    arguments_delta: str


@dataclass(frozen=True, slots=True)
class ToolCallDone:
    """The LLM finished writing a function call (``arguments``: JSON text as written)."""

    turn_id: int
    t_ns: int
    index: int
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A server-side tool returned (``output``), failed or was cancelled (``error``)."""

    turn_id: int
    t_ns: int
    call_id: str
    name: str
    output: str
    #: None: it ran; otherwise why it has no real output ("timeout", "cancelled", a message)
    error: str | None = None


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
    reason: InterruptionKind  # of the false interruption


@dataclass(frozen=True, slots=True)
class ReplyInterrupted:
    """The assistant's reply was cut off; transports must flush queued audio now."""

    turn_id: int
    t_ns: int
    reason: CancelReason


@dataclass(frozen=True, slots=True)
class BudgetExceeded:
    turn_id: int
    t_ns: int
    stage: StageName
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
    stage: FailedStage
    message: str
    retryable: bool


Event = (
    SpeechStarted
    | EndpointDetected
    | TurnContinued
    | TranscriptPartial
    | TranscriptFinalized
    | ReplyStarted
    | ClauseSynthesized
    | ReplyGenerated
    | AssistantTextStreamed
    | ToolCallStreamed
    | ToolCallDone
    | ToolResult
    | ReplyPaused
    | ReplyResumed
    | ReplyInterrupted
    | BudgetExceeded
    | TurnCompleted
    | TurnFailed
)
