"""Who has the floor, decided in pure code (no clock, no asyncio).

:mod:`~voice_pipeline.turntaking.machine` is the one state machine of turns and
replies; :mod:`~voice_pipeline.turntaking.phases` its phases, transition table and live turns;
:mod:`~voice_pipeline.turntaking.messages` what goes in (frames, evidence, options)
and the commands that come out. Barge-in -- when speech over the reply pauses it,
confirms an interruption or resumes -- is :mod:`~voice_pipeline.turntaking.bargein`;
telling the assistant's own voice coming back from the user's is
:mod:`~voice_pipeline.turntaking.echo`. The end of the user's turn is proposed by
:mod:`vad.endpointer` and decided by :mod:`vad.end_of_turn` (the words and the
sound of each pause); the machine carries the verdict, and
:mod:`~voice_pipeline.turntaking.ending` decides when speech after it takes it
back (continuation). Turns the client starts and ends itself (push-to-talk,
manual detection) are :mod:`~voice_pipeline.turntaking.hold`.
"""
