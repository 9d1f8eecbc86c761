"""A clause's audio as a reply sends it, and what every reply of a session runs on.

:func:`synthesize_clause` runs the TTS engine on one clause (in a worker thread) and stamps
when it ran (the ledger's TTS span). A reply's *first* clause is synthesized head first
(``tts.head_first``, :mod:`tts.head_first`): its first ~0.28 s is decoded and sent while the
rest is decoded, so the first audio comes ~20-60 ms sooner; later clauses are synthesized
while earlier ones play and gain nothing from it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from llm.base import LLM
from tts.base import TTS, synthesize_head
from voice_pipeline.config import TTSConfig
from voice_pipeline.conversation.phrases import Phrases
from voice_pipeline.tools.runner import ToolBox
from voice_pipeline.transport import Transport

__all__ = ["ClauseAudio", "ReplyDeps", "SleepUntil", "synthesize_clause"]

SleepUntil = Callable[[int], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ClauseAudio:
    """One clause's audio at the TTS engine's rate, and when its synthesis ran (clock ns,
    stamped in its worker thread); head first: ``rest()`` (blocking) gives the remainder,
    about ``rest_samples`` long."""

    pcm: NDArray[np.int16]
    start_ns: int
    end_ns: int
    rest: Callable[[], NDArray[np.int16]] | None = None
    rest_samples: int = 0


def synthesize_clause(tts: TTS, text: str, clock: Callable[[], int], *, head_first: bool) -> ClauseAudio:
    """``text`` synthesized (blocking: call it from a worker thread), head first if asked
    and the engine can."""
    start = clock()
    if not head_first:
        return ClauseAudio(tts.synthesize(text), start, clock())
    parts = synthesize_head(tts, text)
    return ClauseAudio(parts.head, start, clock(), parts.rest, parts.rest_samples)


@dataclass(frozen=True, slots=True)
class ReplyDeps:
    """What every reply of a session runs on, and the four settings it reads -- nothing
    else of the :class:`~voice_pipeline.config.Config` or the engines (the session cuts
    them out: :func:`voice_pipeline.conversation.wiring.reply_deps`)."""

    llm: LLM
    tts: TTS
    transport: Transport
    clock: Callable[[], int]
    sleep_until: SleepUntil
    phrases: Phrases
    max_tokens: int  # llm.max_tokens
    tts_cfg: TTSConfig  # how the reply is cut into chunks, and whether its first is sent head first
    filler_text: str  # dialogue.filler_text
    repeat_stop_words: int  # dialogue.repeat_stop_words
    #: the session's server-side tools (dialogue.tools); None: none, or the client's own
    tools: ToolBox | None = None
