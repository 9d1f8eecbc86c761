"""Function tools in the voice loop (issue #19).

* :mod:`.calls` -- the LLM's streamed call deltas assembled into complete calls (pure).
"""
