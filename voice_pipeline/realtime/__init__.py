"""The OpenAI Realtime API (GA) protocol, without I/O: the ``/v1/realtime`` endpoint's core.

Pure, synchronous modules (no asyncio, no sockets; the openai package is never
imported -- it is a test dependency, the reference the tests validate against):

* :mod:`.client_events` -- client events, typed, and the parser (frame -> event | error)
* :mod:`.server_events`, :mod:`.event_json` -- server events, typed, and their serializer (event -> JSON)
* :mod:`.session_config`, :mod:`.session_update`, :mod:`.session_parse` -- the session's
  configuration and ``session.update`` (the update and its merge; reading it)
* :mod:`.items`, :mod:`.conversation` -- conversation items and the item store
* :mod:`.response` -- one response's server events in the GA order
* :mod:`.input` -- the input audio buffer's server events (speech, commit, transcription)
* :mod:`.audio` -- ``audio/pcm`` (24 kHz), ``audio/pcmu``, ``audio/pcma`` to and from the pipeline
* :mod:`.tools` -- function tools, and whether the model can call them
* :mod:`.errors`, :mod:`.wire` -- errors in the protocol's shape; guarded JSON reading

See docs/realtime.md for what is supported.
"""
