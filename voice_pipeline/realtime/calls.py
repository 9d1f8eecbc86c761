"""A response's function calls: the reply's call events -> the sequencer's steps (pure).

On ``/v1/realtime`` tools run on the client: a reply that calls functions just ends
with its calls, and the client answers each with a ``function_call_output`` item and
asks for the next response. The session's reply streams each call as
:class:`~voice_pipeline.events.ToolCallStreamed` pieces (``index`` tells a reply's
calls apart, in the order the model began them) and, once the LLM is done, one
:class:`~voice_pipeline.events.ToolCallDone` per call with its whole arguments.
:class:`ResponseCalls` turns them into the GA events of one ``function_call`` output
item per call, each with its own ``output_index``::

    first piece of a call   response.output_item.added (function_call, in_progress,
                            arguments ""), conversation.item.added
    each piece              response.function_call_arguments.delta
    its ToolCallDone        response.function_call_arguments.done, response.output_item.done
                            (completed), conversation.item.done -- then ``error`` if the call
                            is not usable as written (see below)

A call streams live while no message item of the response is open; a piece of a new
call ends the call before it (parallel calls come one after the other). A call the
model begins while the response's text or audio message is still open is held, and
sent whole when the response ends (before its ``response.done``), so items never
interleave. If the response is cancelled or fails, a held call is dropped, and a
call being streamed ends ``incomplete`` with the sequencer's other items. Arguments
a ToolCallDone has beyond what was streamed are sent as one more delta first; pieces
of a call whose item is already done (an engine interleaving its calls) cannot be
sent: the item keeps what it was sent, and the error below says so. A repeated
ToolCallDone is ignored.

A call whose arguments are not a JSON object, or that names a function the response
did not offer, still completes as written (the conversation keeps the call the model
made, so the client can answer it and the history stays consistent -- as OpenAI's
server passes a model's arguments through unchecked), and is followed by one
``error`` event (``invalid_function_call``, type ``server_error``) naming the call;
the response and the session go on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from dataclasses import dataclass

from voice_pipeline import events as ev
from voice_pipeline.realtime.errors import ErrorCode, ErrorType, ProtocolError, quote
from voice_pipeline.realtime.response import ResponseSequencer
from voice_pipeline.realtime.server_events import ErrorOccurred, ServerEvent

log = logging.getLogger(__name__)


def call_error(
    call_id: str, name: str, arguments: str, offered: Collection[str], *, cut: bool = False
) -> ProtocolError | None:
    """Why the call the model wrote is not usable as written (None: it is); ``cut``: its
    item was done before the rest of its arguments came."""
    if name not in offered:
        problem = f"names a function the response did not offer ({quote(name)})"
    elif cut:
        problem = "was done before the rest of its arguments came (the engine interleaved calls)"
    else:
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            problem = f"has arguments that are not valid JSON ({exc})"
        else:
            if isinstance(value, dict):
                return None
            problem = f"has arguments that are not a JSON object ({type(value).__name__})"
    return ProtocolError(
        ErrorCode.INVALID_FUNCTION_CALL,
        f"the model's function call {call_id} ({name or 'no name'}) {problem}; its item holds "
        f"the call as the model wrote it: {quote(arguments)}",
        type=ErrorType.SERVER,
    )


@dataclass(slots=True)
class _Call:
    call_id: str
    name: str
    arguments: str = ""
    #: None: not sent yet (held); else the item's id
    item_id: str | None = None
    done: bool = False  # its ToolCallDone came
    ended: bool = False  # its item is done (output_item.done sent)


class ResponseCalls:
    """The function calls of one response (``offered``: the names of its tools)."""

    def __init__(self, seq: ResponseSequencer, offered: frozenset[str]) -> None:
        self.seq = seq
        self.offered = offered
        self._calls: dict[int, _Call] = {}  # by the reply's call index

    def _live(self) -> _Call | None:
        """The call whose item is open in the sequencer, if any."""
        open_id = self.seq.open_item_id
        return next((c for c in self._calls.values() if c.item_id == open_id and not c.ended), None)

    def _can_stream(self) -> bool:
        """No message item is open (calls never interleave with one)."""
        return self.seq.open_item_id is None or self._live() is not None

    def _sync_ended(self) -> None:
        """Calls the sequencer closed by itself (a new item began) are ended."""
        open_id = self.seq.open_item_id
        for c in self._calls.values():
            if c.item_id is not None and c.item_id != open_id:
                c.ended = True

    def _start(self, call: _Call) -> list[ServerEvent]:
        events = self.seq.function_call(call.name, call.call_id)
        call.item_id = self.seq.open_item_id
        self._sync_ended()
        return events

    def _end(self, call: _Call, *, cut: bool = False) -> list[ServerEvent]:
        """The call is complete: its item's done events, then its error if it has one."""
        events: list[ServerEvent] = []
        if not call.ended and self._live() is call:
            events += self.seq.close_call()
        call.ended = True
        error = call_error(call.call_id, call.name, call.arguments, self.offered, cut=cut)
        if error is not None:
            log.warning("%s", error.message)
            events.append(ErrorOccurred(error))
        return events

    def on_event(self, e: ev.ToolCallStreamed | ev.ToolCallDone) -> list[ServerEvent]:
        return self.streamed(e) if isinstance(e, ev.ToolCallStreamed) else self.done(e)

    def streamed(self, e: ev.ToolCallStreamed) -> list[ServerEvent]:
        """A piece of a call (the reply's ToolCallStreamed)."""
        if self.seq.done:
            return []
        self._sync_ended()
        delta = e.arguments_delta
        call = self._calls.get(e.index)
        if call is None:
            call = self._calls[e.index] = _Call(e.call_id, e.name, delta)
            if not self._can_stream():
                return []  # held: a message item is open
            return self._start(call) + (self.seq.arguments(delta) if delta else [])
        if call.item_id is None:  # held
            call.arguments += delta
            return []
        if call.ended or call.done:  # its item is done (the engine interleaved calls)
            log.warning("call %s: a piece after its item was done is not sent", call.call_id)
            return []
        call.arguments += delta
        return self.seq.arguments(delta) if delta else []

    def done(self, e: ev.ToolCallDone) -> list[ServerEvent]:
        """A call is complete (the reply's ToolCallDone, its whole arguments)."""
        if self.seq.done:
            return []
        self._sync_ended()
        call = self._calls.get(e.index)
        if call is not None and call.done:
            return []  # told twice
        if call is None:
            call = self._calls[e.index] = _Call(e.call_id, e.name)
        call.done = True
        if call.item_id is None:  # not sent yet: sent whole, as it is now
            call.name, call.arguments = e.name or call.name, e.arguments
            if not self._can_stream():
                return []  # held until the response ends
            return self._send_whole(call)
        if call.ended:  # its item was done early (a message began, or the next call)
            return self._end(call, cut=e.arguments != call.arguments)
        events: list[ServerEvent] = []
        if e.arguments != call.arguments and e.arguments.startswith(call.arguments):
            rest = e.arguments[len(call.arguments) :]  # what was never streamed
            call.arguments = e.arguments
            events += self.seq.arguments(rest)
        return events + self._end(call)

    def _send_whole(self, call: _Call) -> list[ServerEvent]:
        events = self._start(call)
        if call.arguments:
            events += self.seq.arguments(call.arguments)
        return events + self._end(call)

    def flush(self) -> list[ServerEvent]:
        """The response completes: the calls held back are sent whole (after its message)."""
        events: list[ServerEvent] = []
        for _, call in sorted(self._calls.items()):
            if call.item_id is None and call.done:
                events += self._send_whole(call)
        return events

    @property
    def item_ids(self) -> tuple[str, ...]:
        """The response's function-call items sent so far."""
        return tuple(c.item_id for c in self._calls.values() if c.item_id is not None)
