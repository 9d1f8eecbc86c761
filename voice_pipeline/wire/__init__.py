"""The ``/ws`` wire protocol v1 (docs/protocol.md), typed both ways, without I/O.

Every message is a frozen dataclass with ``serialize()`` (the exact JSON text that goes
on the wire) and a parser that gives it back, ``parse(serialize(m)) == m``:

* :mod:`.client_messages`: client -> server (``start``, ``playback``, ``interrupt``,
  ``ptt.start``, ``ptt.end``, ``stop``) and :func:`~.client_messages.parse_client_message`,
  the server's strict parser (its :class:`~.client_messages.ErrorCode` is the ``error``
  the server answers with; it guards against deep nesting, huge numbers and NaN).
* :mod:`.server_messages`: server -> client (``ready`` ... ``error``),
  :func:`~.server_messages.parse_server_message` and :class:`~.server_messages.ServerStream`
  (a client's view of the frames in order: the audio header paired with its binary frame).
  A type this client does not know parses to :class:`~.server_messages.Unknown`, which
  clients ignore (a newer server may send more); a known type with a missing or mistyped
  field is a :class:`~.server_messages.ServerMessageError`.
* :mod:`.codec`: the one JSON encoding (compact, UTF-8) and the protocol version.

The server maps its session events onto these messages (``server/protocol.py``);
``clients/``, ``voice_pipeline.bench`` and the tests speak through them. Connecting as a
client (the handshake's errors, ``start`` -> ``ready``) is :mod:`voice_pipeline.connect`.
This package imports no asyncio and no socket.
"""
