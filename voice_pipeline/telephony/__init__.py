"""Telephony bridges: phone audio (8 kHz G.711 µ-law) in and out of a session.

* :mod:`.mulaw` -- G.711 µ-law encode/decode in numpy, bit-exact to the standard.
* :mod:`.twilio` -- the Twilio Media Streams protocol (pure: parse and build messages).
* :mod:`.twilio_transport` -- the paced :class:`~voice_pipeline.transport.Transport` of a call.
* :mod:`.twilio_connection` -- one call on the server's ``/twilio`` WebSocket.
* :mod:`.audiosocket` -- the Asterisk AudioSocket protocol (pure: a byte parser).
* :mod:`.audiosocket_server` -- ``serve --audiosocket-port``: TCP calls, paced slin16 out.
"""
