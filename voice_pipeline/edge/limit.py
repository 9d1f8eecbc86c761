"""How many sessions a server runs at once over all its edges, and where edges report."""

from __future__ import annotations

from typing import Protocol

from voice_pipeline import events as ev


class EdgeMetrics(Protocol):
    """Where an edge reports (the server's ``/metrics``)."""

    def observe(self, event: ev.Event) -> None: ...

    def session_opened(self) -> None: ...

    def endpoint_opened(self, endpoint: str) -> None: ...

    def session_closed(self) -> None: ...

    def session_refused(self, reason: str) -> None: ...


class _NoMetrics:
    def observe(self, event: ev.Event) -> None:
        pass

    def session_opened(self) -> None:
        pass

    def endpoint_opened(self, endpoint: str) -> None:
        pass

    def session_closed(self) -> None:
        pass

    def session_refused(self, reason: str) -> None:
        pass


NO_METRICS: EdgeMetrics = _NoMetrics()


class SessionLimit:
    """At most ``max_sessions`` sessions at once, over every edge that shares this object;
    each session opened, closed or refused (reason ``"limit"``) is reported to ``metrics``."""

    def __init__(self, max_sessions: int, metrics: EdgeMetrics = NO_METRICS) -> None:
        self.max_sessions = max_sessions
        self.metrics = metrics
        self.active = 0

    def acquire(self) -> bool:
        """Take a slot for a new session; False (counted as refused) when none is free."""
        if self.active >= self.max_sessions:
            self.metrics.session_refused("limit")
            return False
        self.active += 1
        self.metrics.session_opened()
        return True

    def release(self) -> None:
        """The session of a slot :meth:`acquire` gave has ended."""
        self.active -= 1
        self.metrics.session_closed()
