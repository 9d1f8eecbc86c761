"""Fixed phrases: words the assistant says that are not the LLM's, synthesized once.

The *filler* (spoken when a reply's first clause is late, ``dialogue.filler_text``),
the *tool filler* (spoken while a slow server-side tool runs) and the *apology*
(spoken when a stage fails) are one mechanism: :class:`Phrases` synthesizes each
text once per session, at the listener's rate, and keeps it. A reply queues a
phrase for its own speaker (:class:`QueuedPhrase`) or says it after its words
(:meth:`voice_pipeline.conversation.reply.Reply.say`), so barge-in pauses, resumes
and cancels a phrase exactly like the reply's own words. A phrase is never part of
the reply's text (``Reply.text``, ``Reply.clauses``), so it stays out of the history.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tts.base import TTS
from voice_pipeline.audio import resample_int16

log = logging.getLogger(__name__)

__all__ = ["Phrases", "QueuedPhrase"]


class Phrases:
    """Fixed phrases synthesized once and kept, at the listener's rate (one per session)."""

    def __init__(self, tts: TTS, output_rate_hz: int) -> None:
        self._tts = tts
        self._rate = output_rate_hz
        self._pcm: dict[str, NDArray[np.int16]] = {}

    async def get(self, text: str) -> NDArray[np.int16]:
        """The phrase's audio; synthesized on first use (in a worker thread)."""
        pcm = self._pcm.get(text)
        if pcm is None:
            raw = await asyncio.to_thread(self._tts.synthesize, text)
            pcm = self._pcm[text] = resample_int16(raw, self._tts.sample_rate_hz, self._rate)
        return pcm

    async def try_get(self, text: str) -> NDArray[np.int16] | None:
        """The phrase's audio, or None if it cannot be synthesized (the failure is logged,
        not raised: the phrase is tried again on its next use)."""
        try:
            return await self.get(text)
        except Exception:
            log.warning("cannot synthesize %r", text, exc_info=True)
            return None

    async def prepare(self, text: str) -> None:
        """Synthesize ``text`` ahead of its first use (a failure is logged, not raised)."""
        await self.try_get(text)


@dataclass(frozen=True, slots=True)
class QueuedPhrase:
    """A fixed phrase queued for a reply's speaker, ahead of (or between) the reply's clauses."""

    text: str
    pcm: NDArray[np.int16]
    #: spoken between the reply's words (the tool filler): counted among its clauses
    inline: bool = False
