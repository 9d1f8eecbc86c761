"""The edge: what every way into the pipeline shares, so each edge keeps only its protocol.

Edges today: the file runner (:mod:`voice_pipeline.runner`), ``/ws``
(:mod:`voice_pipeline.server.connection`), ``/twilio``
(:mod:`voice_pipeline.telephony.twilio_connection`) and AudioSocket
(:mod:`voice_pipeline.telephony.audiosocket_server`). The pieces, one module each
(:mod:`.scope`, :mod:`.peer_audio`, :mod:`.drain`, :mod:`.limit`; this package re-exports
them):

* :class:`SessionScope` -- one edge's session: it builds the
  :class:`~voice_pipeline.conversation.session.Session` once the edge knows its transport
  (:meth:`~SessionScope.open`, or :meth:`~SessionScope.adopt` for one built
  otherwise), runs the idle deadline (:meth:`~SessionScope.receive`: the next
  message, or :data:`IDLE` once nothing moved the deadline for
  ``server.idle_timeout_s``), pushes the peer's audio in
  (:meth:`~SessionScope.push_audio`, which also moves the deadline) and closes in
  one order (:meth:`~SessionScope.aclose`: the session -- its turns cancelled,
  the LLM aborted -- then the transport's writer, then whatever else the edge
  registered). :meth:`~SessionScope.run` wraps an edge's receive loop: the peer
  leaving is an end, a bug is logged and the peer told, and the scope is closed
  whatever happened.
* :class:`PeerAudio` -- int16 audio at whatever rate the peer sends (one soxr
  stream per rate, so a rate may change mid-call) to float32 at the pipeline
  rate, stamped with the moment it arrived.
* :func:`drain_until` -- "wait until the listener has played the turn, at most
  its duration plus a grace": the decision is :class:`DrainDeadline` (pure), the
  edge's transport supplies what is unplayed and how to wait for a change.
* :class:`SessionLimit` and :class:`EdgeMetrics` -- the server's ``max_sessions``,
  shared by every edge it runs (AudioSocket's calls included), and where edges
  report: sessions opened, closed and refused, and every session event (turns,
  budgets) for ``/metrics``. :class:`~voice_pipeline.server.metrics.ServerMetrics`
  is one; this module needs none of the server.

Two submodules serve the WebSocket edges (``/ws`` and ``/v1/realtime``), so that
neither the server nor the realtime protocol imports the other:
:mod:`~voice_pipeline.edge.outbound` (one connection's bounded send queue and its
writer task) and :mod:`~voice_pipeline.edge.playback` (what a remote listener has
played of each reply).

A new edge, in outline (the realtime endpoint can take this shape)::

    scope = SessionScope(engines, cfg, clock=clock, label="session")
    scope.close_after(outbound.aclose)          # anything that outlives the session
    async def serve() -> None:
        while (msg := await scope.receive(ws.recv)) is not IDLE:
            ...                                  # parse; on the start message:
            scope.open(transport, aclose=transport.aclose)   # or scope.adopt(session)
            ...                                  # on audio:
            await scope.push_audio(pcm, rate_hz)
        await ws.close(1000, "idle")
    await scope.run(serve, gone=(ConnectionClosed,), on_error=lambda: ws.close(1011, "internal"))

and, on a server, ``limit.acquire()`` before the connection is served (False: refuse
it), ``limit.release()`` after, and ``limit.metrics.observe`` as the transport's
``on_event``. An edge for which every message is activity (not only audio) calls
``scope.active()`` after each; one whose audio arrives already converted pushes it
with ``session.push_audio`` itself; tasks of its own (cancel them) and its writer
go in ``close_after``, in the order they must close.
"""

from voice_pipeline.edge.drain import MIN_WAIT_S, DrainDeadline, Drained, drain_until
from voice_pipeline.edge.limit import NO_METRICS, EdgeMetrics, SessionLimit
from voice_pipeline.edge.peer_audio import PeerAudio
from voice_pipeline.edge.scope import IDLE, Close, Idle, SessionScope

__all__ = [
    "IDLE",
    "MIN_WAIT_S",
    "NO_METRICS",
    "Close",
    "DrainDeadline",
    "Drained",
    "EdgeMetrics",
    "Idle",
    "PeerAudio",
    "SessionLimit",
    "SessionScope",
    "drain_until",
]
