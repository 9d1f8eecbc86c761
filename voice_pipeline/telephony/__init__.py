"""Telephony bridges: phone audio (8 kHz G.711 µ-law) in and out of a session.

* :mod:`.mulaw` -- G.711 µ-law encode/decode in numpy, bit-exact to the standard.
* :mod:`.twilio` -- the Twilio Media Streams protocol (pure: parse and build messages).
* :mod:`.pacing` -- the paced writer's decisions, pure: what to send next and when, what was heard.
* :mod:`.paced` -- the :class:`~voice_pipeline.transport.Transport` of a call: the pacer's asyncio side.
* :mod:`.twilio_transport` -- the Twilio call's transport (µ-law frames, marks, clear).
* :mod:`.twilio_connection` -- one call on the server's ``/twilio`` WebSocket.
* :mod:`.audiosocket` -- the Asterisk AudioSocket protocol (pure: a byte parser).
* :mod:`.audiosocket_server` -- ``serve --audiosocket-port``: TCP calls, paced 8 kHz slin out.

Nothing here imports :mod:`voice_pipeline.server`: what both need is in
:mod:`voice_pipeline.edge` (session scope, session limit, metrics as a protocol) and
:mod:`voice_pipeline.access` (token and address checks).
"""
