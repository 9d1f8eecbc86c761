"""What ``voice-pipeline talk`` shows: pure formatting of server events, no I/O.

:class:`TurnView` takes the server's messages (:mod:`voice_pipeline.wire.server_messages`)
one at a time and returns the screen updates they cause (:class:`Status`: redraw the
status line; :class:`Line`: print a finished line). The runtime in :mod:`clients.talk`
only writes them out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from voice_pipeline.ledger.records import StageName, TurnRecord
from voice_pipeline.wire.server_messages import (
    AssistantText,
    ErrorReported,
    ReplyInterrupted,
    ServerMessage,
    ToolCalled,
    ToolReturned,
    TranscriptFinal,
    TranscriptPartial,
    TurnContinued,
    TurnFailed,
    TurnLatency,
)

#: the stages of the latency line: (label, ledger stage name)
LATENCY_STAGES: tuple[tuple[str, str], ...] = (
    ("endpoint", "endpointing"),
    ("asr", "asr_final"),
    ("llm first token", "llm_first_token"),
    ("tool", "tool"),  # only in a turn whose tool ran before its first words
    ("tts first audio", "tts_first_audio"),
    ("total", "voice_to_voice"),
)

RED = "\x1b[31m"
GREEN = "\x1b[32m"
DIM = "\x1b[2m"
RESET = "\x1b[0m"


@dataclass(frozen=True, slots=True)
class Line:
    """A finished line: printed once, scrolls up."""

    text: str


@dataclass(frozen=True, slots=True)
class Status:
    """The live bottom line (partial transcript, streaming reply): redrawn in place."""

    text: str


Update = Line | Status


def level_meter(samples_peak: float, width: int = 30) -> str:
    """A bar for a peak level in [0, 1], on a dB scale from -60 dBFS to 0."""
    db = 20.0 * math.log10(max(samples_peak, 1e-6))
    filled = round(width * min(1.0, max(0.0, (db + 60.0) / 60.0)))
    return "[" + "#" * filled + " " * (width - filled) + f"] {max(db, -60.0):5.0f} dB"


def latency_line(record: TurnRecord, budgets: dict[str, float], *, colour: bool) -> str:
    """One line of a turn's stage latencies; a stage over its budget in red (if ``colour``)."""
    parts = []
    for label, name in LATENCY_STAGES:
        ms = record.stages_ms.get(StageName(name))
        if ms is None and name == StageName.TOOL:
            continue
        if ms is None:
            parts.append(f"{label} -")
            continue
        text = f"{label} {ms:.0f} ms"
        budget = budgets.get(name)
        if colour:
            over = budget is not None and ms > budget
            text = f"{RED if over else GREEN}{text}{RESET}"
        elif budget is not None and ms > budget:
            text += f" (over {budget:.0f})"
        parts.append(text)
    return "latency: " + " | ".join(parts)


class TurnView:
    """Turns server events into screen updates for one session."""

    def __init__(self, budgets: dict[str, float], *, colour: bool) -> None:
        self.budgets = budgets
        self.colour = colour
        self._reply: dict[int, str] = {}

    def event(self, msg: ServerMessage) -> list[Update]:
        match msg:
            case TranscriptPartial(committed=committed, tentative=tentative):
                text = f"{committed} {tentative}".strip()
                return [Status(f"you: {text}")]
            case TranscriptFinal(text=text):
                return [Line(f"you: {text}")]
            case TurnContinued(turn_id=turn):  # the user went on: the reply so far is void
                dropped = self._reply.pop(turn, None)
                return [Line("  (you went on: the reply is dropped)")] if dropped is not None else []
            case AssistantText(turn_id=turn, delta=delta):
                self._reply[turn] = self._reply.get(turn, "") + delta
                return [Status(f"assistant: {self._reply[turn].strip()}")]
            case ReplyInterrupted(turn_id=turn, reason=reason):
                return self._finish_reply(turn, f" [interrupted: {reason}]")
            case TurnLatency(turn_id=turn, record=record):
                out = self._finish_reply(turn, "")
                return [*out, Line(latency_line(record, self.budgets, colour=self.colour))]
            case ToolCalled(name=name, arguments=arguments):
                return [Line(f"  -> tool {name}({_short(arguments)})")]
            case ToolReturned(name=name, output=output, error=error):
                said = f"failed: {error}" if error is not None else _short(output)
                return [Line(f"  <- tool {name}: {said}")]
            case TurnFailed(stage=stage, message=message):
                return [Line(f"turn failed in {stage}: {message}")]
            case ErrorReported(code=code, message=message):
                return [Line(f"server error {code}: {message}")]
        return []  # the rest (and a type from a newer server, Unknown) shows nothing

    def _finish_reply(self, turn: int, suffix: str) -> list[Update]:
        text = self._reply.pop(turn, None)
        if text is None:
            return []
        return [Line(f"assistant: {text.strip()}{suffix}")]


def _short(text: str, limit: int = 100) -> str:
    """One line of at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
