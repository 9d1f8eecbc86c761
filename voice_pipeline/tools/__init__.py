"""Function tools in the voice loop (issue #19).

* :mod:`.calls` -- the LLM's streamed call deltas assembled into complete calls (pure).
* :mod:`.schema` -- a function's JSON schema from its hints and docstring; arguments
  checked against it (pure).
* :mod:`.registry` -- ``dialogue.tools`` imported and described; the :func:`tool` decorator.
* :mod:`.loop` -- the tool loop's decisions and each call's state in the history (pure).
* :mod:`.runner` -- a round of calls run beside the reply (the thin asyncio side).
"""

from voice_pipeline.tools.registry import tool

__all__ = ["tool"]
