"""``voice-pipeline bench``: simulated callers against a running server, at the wire.

Pure parts: :mod:`.options` (what to run), :mod:`.scenario` (who says what,
when), :mod:`.tracker` (attributing what arrives to turns, the client-side
figures), :mod:`.stats` (percentiles, CPU, the ramp rule), :mod:`.report`
(JSON), :mod:`.text` (printed) and :mod:`.html`. Thin I/O: :mod:`.caller` (the paced microphone
and a caller's script), :mod:`.caller_ws` and :mod:`.caller_twilio` (the two
wire protocols), :mod:`.speech` (Piper or WAVs), :mod:`.run` (sessions,
scrapes, the ramp), :mod:`.cli`. Errors: :mod:`.errors`.
"""
