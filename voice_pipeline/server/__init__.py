"""The WebSocket server of ``voice-pipeline serve`` (wire protocol: docs/protocol.md).

Pure parts, no I/O: :mod:`.protocol` (the server's side of :mod:`voice_pipeline.wire`:
client frames in order, session events to messages),
:mod:`.playback` (what the listener has played), :mod:`.metrics` (Prometheus text),
:mod:`.web` (static files, health). Runtime parts: :mod:`.outbound` (one bounded queue and
one writer task per connection), :mod:`.transport` (the session's
:class:`~voice_pipeline.transport.Transport`), :mod:`.connection` (one client) and
:mod:`.app` (the server: routing, limits, shutdown).
"""
