"""One traced session: its span, and the transport through which its turns are seen.

:class:`TracedTransport` stands between the session and the edge's transport: it passes
everything on unchanged and shows each event to the :class:`SessionTrace` after it. The
trace keeps when each reply was paused and resumed (``ReplyPaused`` / ``ReplyResumed``),
and on ``TurnCompleted`` -- the turn's record is complete -- turns the record into spans
(:func:`voice_pipeline.telemetry.spans.turn_span`) under the session's span, and its
figures into the metrics. A failure in there is logged once and never reaches the session.

The session's span starts when the session opens and ends when its scope closes; its
trace id is entered into the opening task's context (:mod:`voice_pipeline.telemetry.context`)
so that the remote LLM client's requests carry it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from opentelemetry import trace

from voice_pipeline import events as ev
from voice_pipeline.clock import now_ns
from voice_pipeline.ledger.ledger import Mark
from voice_pipeline.telemetry import context
from voice_pipeline.telemetry.spans import TurnOptions, turn_span
from voice_pipeline.transport import trim_turns

if TYPE_CHECKING:
    from voice_pipeline.telemetry.export import Telemetry
    from voice_pipeline.transport import Transport

log = logging.getLogger("voice_pipeline.telemetry")


class SessionTrace:
    def __init__(self, telemetry: Telemetry, session_id: str, edge: str) -> None:
        self._telemetry = telemetry
        self._opts = TurnOptions(telemetry.budget, telemetry.settings.include_text, telemetry.model)
        self.session_id = session_id
        self._extra: dict[str, Any] = {"voice.session.id": session_id, "gen_ai.conversation.id": session_id}
        self._pauses: dict[int, list[int]] = {}
        self._resumes: dict[int, list[int]] = {}
        self._failed = False
        self._closed = False
        self._span: trace.Span | None = None
        tracer = telemetry.tracer
        if tracer is not None:
            self._span = tracer.start_span(
                "session",
                attributes={**self._extra, "voice.session.edge": edge},
                start_time=now_ns() + telemetry.offset_ns,
            )
            self._parent = trace.set_span_in_context(self._span)
            self.ids = context.SessionIds(self._span.get_span_context().trace_id)
            context.enter(self.ids)  # the opening task's context: every task of the session

    def observe(self, event: ev.Event) -> None:
        """One of the session's events (never raises)."""
        try:
            match event:
                case ev.ReplyPaused(turn_id=tid, t_ns=t):
                    self._pauses.setdefault(tid, []).append(t)
                    trim_turns(self._pauses)
                case ev.ReplyResumed(turn_id=tid, t_ns=t):
                    self._resumes.setdefault(tid, []).append(t)
                    trim_turns(self._resumes)
                case ev.TurnCompleted(record=record):
                    self._turn(record)
                case _:
                    pass
        except Exception:
            if not self._failed:
                self._failed = True
                log.exception("telemetry: session %s: a turn could not be traced", self.session_id)

    def _turn(self, record: Any) -> None:
        tid = record.turn_id
        pauses, resumes = self._pauses.pop(tid, []), self._resumes.pop(tid, [])
        if self._span is not None:
            marks = record.marks_ns
            llm = self.ids.take_request(marks.get(Mark.SPEECH_START), marks.get(Mark.LLM_FIRST_TOKEN))
            spec = turn_span(record, self._opts, pauses=pauses, resumes=resumes, llm_span_id=llm)
            if spec is not None:
                self._telemetry.export(spec, self._parent, self._extra)
        self._telemetry.measure(record)

    async def aclose(self) -> None:
        """The session is over: its span ends (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._span is not None:
            self.ids.closed = True
            self._span.end(end_time=now_ns() + self._telemetry.offset_ns)


class TracedTransport:
    """A :class:`~voice_pipeline.transport.Transport` that shows every event to a trace."""

    def __init__(self, inner: Transport, trace_: SessionTrace) -> None:
        self._inner = inner
        self._trace = trace_
        self.output_rate_hz = inner.output_rate_hz  # fixed once the session opens

    def emit(self, event: ev.Event) -> None:
        self._inner.emit(event)
        self._trace.observe(event)

    async def play(self, turn_id: int, pcm: NDArray[np.int16]) -> None:
        await self._inner.play(turn_id, pcm)

    def clear(self, turn_id: int) -> None:
        self._inner.clear(turn_id)

    def played_samples(self, turn_id: int) -> int:
        return self._inner.played_samples(turn_id)

    async def drain(self, turn_id: int) -> None:
        await self._inner.drain(turn_id)
