"""Where every millisecond of every turn went, and which stage broke its budget.

:mod:`~voice_pipeline.ledger.ledger` holds the marks, the stages between them (the
critical path adds up to voice-to-voice) and one turn's ledger;
:mod:`~voice_pipeline.ledger.aggregate` the session's aggregate;
:mod:`~voice_pipeline.ledger.records` the typed record of a finished turn
(JSON both ways); :mod:`~voice_pipeline.ledger.report` its human-readable table.
Pure: callers pass monotonic timestamps in.
"""
