"""The WebSocket server of ``voice-pipeline serve`` (wire protocol: docs/protocol.md).

Pure parts, no I/O: :mod:`.protocol` (the server's side of :mod:`voice_pipeline.wire`:
client frames in order, session events to messages),
:mod:`.metrics` (Prometheus text), :mod:`.web` (static files, health), :mod:`.ratelimit`.
Runtime parts: :mod:`.transport` (the session's :class:`~voice_pipeline.transport.Transport`),
:mod:`.connection` (one client), :mod:`.endpoints`, :mod:`.listen` and :mod:`.app` (the
server: routing, limits, shutdown). What every edge shares -- the bounded outbound queue with
its writer task, and what the listener has played -- is in :mod:`voice_pipeline.edge`.
"""
