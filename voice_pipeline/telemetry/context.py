"""The session's trace, as the LLM client sees it: the W3C ``traceparent`` of a request.

A traced session (:class:`SessionIds`) is entered into the context of the edge's task
that opens it (:func:`enter`), so every task the session spawns from there -- the
replies, the prefetches -- sees it. :func:`llm_headers` is what the remote vLLM client
adds to a chat request: ``traceparent: 00-<the session's trace id>-<a new span id>-01``.
The span id is kept with the moment it was sent; when the turn's record is turned into
spans, its LLM span takes the id of the request sent last before the turn's first token
(:meth:`SessionIds.take_request`), so the vLLM server's own span (``vllm serve
--otlp-traces-endpoint``) hangs under the turn's LLM span.

No OpenTelemetry here: the LLM client imports this module whether or not anything is traced,
and outside a traced session :func:`llm_headers` is ``{}``.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from voice_pipeline.clock import now_ns

#: requests of one session remembered until a turn claims one (the latest)
KEEP_REQUESTS = 16


@dataclass(slots=True)
class SessionIds:
    """One traced session: its trace id, and the LLM requests sent in it."""

    trace_id: int
    clock: Callable[[], int] = now_ns
    closed: bool = False
    #: (sent at, span id) of the chat requests not yet claimed by a turn, oldest first
    requests: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=KEEP_REQUESTS))

    def request(self) -> int:
        """A span id for an LLM request sent now."""
        span_id = secrets.randbits(64) or 1
        self.requests.append((self.clock(), span_id))
        return span_id

    def take_request(self, since_ns: int | None, until_ns: int | None) -> int | None:
        """The span id of the latest request sent in ``[since_ns, until_ns]`` (either bound
        may be None: open); it and every earlier request are forgotten."""
        if until_ns is None:
            return None
        found = None
        while self.requests and self.requests[0][0] <= until_ns:
            sent, span_id = self.requests.popleft()
            if since_ns is None or sent >= since_ns:
                found = span_id
        return found


_SESSION: ContextVar[SessionIds | None] = ContextVar("voice_pipeline_trace", default=None)


def enter(ids: SessionIds) -> None:
    """The calling task (and every task it creates from now on) belongs to this session."""
    _SESSION.set(ids)


def current() -> SessionIds | None:
    ids = _SESSION.get()
    return None if ids is None or ids.closed else ids


def traceparent(trace_id: int, span_id: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def llm_headers() -> dict[str, str]:
    """The ``traceparent`` header of a chat request sent now ({} outside a traced session)."""
    ids = current()
    if ids is None:
        return {}
    return {"traceparent": traceparent(ids.trace_id, ids.request())}
