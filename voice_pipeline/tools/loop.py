"""The tool loop's decisions (pure): what the next round is offered, what each call's
state puts in the conversation, and the texts the LLM is told.

A reply with server-side tools is a series of *rounds*: the LLM streams; if it called
tools, each call runs (:mod:`voice_pipeline.tools.runner`), the assistant message with
the calls and one ``tool`` message per call are appended to the request, and the LLM
streams again, as long as :func:`another_round` says so. :func:`next_offer` says what
the next round may do:

* after a ``required`` (or named) round: words only (``mode: none``) -- asked again
  to call, a model held to calling by structured outputs would call forever;
* after an ``auto`` round: ``auto`` again, up to ``dialogue.tool_max_rounds`` rounds
  of calls; the round after the last one is words only.

Every call of a round is in one of four states (:class:`CallState`); the ``tool``
message of each is :meth:`ToolRound.messages`. No state is left "in progress" in the
history: a call cancelled by barge-in says so, and a call that may finish after the
turn (``cancel_on_interruption=False``) says it is still running until its result
replaces that text (:meth:`voice_pipeline.conversation.history.History.resolve`).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llm.base import ChatMessage, ToolCall, ToolMode, ToolOffer
from voice_pipeline.errors import EngineError

#: what a call cancelled by the user's interruption answers in the history
CANCELLED = "cancelled: the user interrupted before it finished"
#: what a call left running after the user's interruption answers until its result lands
STILL_RUNNING = "still running: the user interrupted; its result replaces this when it finishes"


class Failure(enum.StrEnum):
    """Why a call that ended gave no real output."""

    ARGUMENTS = "arguments"  # the model's arguments: not JSON, or not matching the schema
    NO_TOOL = "no_tool"  # the model named a tool there is not
    RAISED = "raised"  # the tool raised
    TIMEOUT = "timeout"  # the tool took longer than its timeout


#: the failures that are the tool's, not the model's: a round whose every call failed so
#: is a failed turn (the apology is spoken; a small model told only the error may make
#: up the value it could not look up). The model's own mistakes go back to it.
TOOL_FAILURES = (Failure.RAISED, Failure.TIMEOUT)


class CallState(enum.StrEnum):
    RUNNING = "running"
    DONE = "done"  # it returned, failed or timed out: ``ToolOutcome`` says which
    CANCELLED = "cancelled"  # barge-in cancelled it
    DETACHED = "detached"  # barge-in came, it goes on (cancel_on_interruption=False)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a call gave back: ``output`` is what the LLM is told (JSON for an error)."""

    output: str
    #: None: the tool ran and returned; else why not (``ToolResult.error``)
    error: str | None = None
    failure: Failure | None = None


def error_outcome(message: str, failure: Failure) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": message}), message, failure)


def output_text(value: Any) -> str:
    """A tool's return value as the text the LLM reads (a str as is, else JSON)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


def next_offer(offer: ToolOffer, rounds_done: int, max_rounds: int, *, repeated: bool = False) -> ToolOffer:
    """The offer of the round after ``rounds_done`` rounds that called tools (``repeated``:
    the last round only made calls the reply had made already -- a model that calls again
    instead of answering, as Qwen2.5-Coder-0.5B does -- so it gets words only)."""
    if offer.mode is ToolMode.REQUIRED or offer.function is not None or rounds_done >= max_rounds or repeated:
        return ToolOffer(offer.tools, ToolMode.NONE)
    return offer


def another_round(offer: ToolOffer, calls: Sequence[ToolCall], *, token_limit: bool) -> bool:
    """After a round offered the server-side tools (``offer``): whether its ``calls`` are
    run and the LLM asked again -- not if it made none, was offered words only, or the
    reply reached its token limit. A ``required`` round with no call is a failure."""
    if offer.mode is ToolMode.REQUIRED and not calls:
        raise EngineError("the LLM made no tool call (tool_choice required)", retryable=True)
    return bool(calls) and offer.mode is not ToolMode.NONE and not token_limit


def repeats(calls: Sequence[ToolCall], rounds: Sequence[ToolRound]) -> bool:
    """Every one of ``calls`` was made before in ``rounds`` (same name, same arguments)."""
    made = {(c.name, " ".join(c.arguments.split())) for r in rounds for c in r.calls}
    return bool(calls) and all((c.name, " ".join(c.arguments.split())) in made for c in calls)


@dataclass(slots=True)
class ToolRound:
    """One round's calls and the state of each (in the model's order)."""

    calls: tuple[ToolCall, ...]
    #: per call: barge-in cancels it (else it is left to finish)
    cancellable: tuple[bool, ...]
    #: the words the model streamed in the same round, before or beside its calls
    text: str = ""
    states: list[CallState] = field(default_factory=list)
    outcomes: list[ToolOutcome | None] = field(default_factory=list)
    #: the reply was cancelled while calls ran
    abandoned: bool = False

    def __post_init__(self) -> None:
        self.states = [CallState.RUNNING] * len(self.calls)
        self.outcomes = [None] * len(self.calls)

    def finish(self, index: int, outcome: ToolOutcome) -> None:
        if self.states[index] is not CallState.CANCELLED:
            self.states[index] = CallState.DONE
            self.outcomes[index] = outcome

    def cancel(self, index: int) -> None:
        if self.states[index] is CallState.RUNNING:
            self.states[index] = CallState.CANCELLED

    def abandon(self) -> list[int]:
        """The reply was cancelled: every call still running is cancelled or left to
        finish (detached), as its tool says. Returns the indexes cancelled here."""
        self.abandoned = True
        cancelled = []
        for i, state in enumerate(self.states):
            if state is CallState.RUNNING:
                if self.cancellable[i]:
                    self.states[i] = CallState.CANCELLED
                    cancelled.append(i)
                else:
                    self.states[i] = CallState.DETACHED
        return cancelled

    def failed(self) -> str | None:
        """Why the round failed, if every call failed by the tool's own fault (else None)."""
        outcomes = [o for o in self.outcomes if o is not None]
        if not self.calls or len(outcomes) < len(self.calls):
            return None
        if any(o.failure not in TOOL_FAILURES for o in outcomes):
            return None
        return "; ".join(f"{c.name}: {o.error}" for c, o in zip(self.calls, outcomes, strict=True))

    @property
    def settled(self) -> bool:
        return all(s is not CallState.RUNNING for s in self.states)

    def output(self, index: int) -> str:
        outcome = self.outcomes[index]
        match self.states[index]:
            case CallState.DONE if outcome is not None:
                return outcome.output
            case CallState.CANCELLED:
                return json.dumps({"error": CANCELLED})
            case _:
                return json.dumps({"status": STILL_RUNNING})

    def messages(self) -> list[ChatMessage]:
        """The assistant message with the calls, then one ``tool`` message per call."""
        out = [ChatMessage("assistant", self.text.strip(), tool_calls=self.calls)]
        out += [
            ChatMessage("tool", self.output(i), tool_call_id=call.call_id)
            for i, call in enumerate(self.calls)
        ]
        return out


def exchange(rounds: Sequence[ToolRound]) -> list[ChatMessage]:
    """A reply's tool messages, round after round (what enters the history)."""
    return [m for r in rounds for m in r.messages()]
