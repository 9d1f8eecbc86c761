"""The reply's first chunk synthesized a token before its cut, on the chunker's guess.

A chunk is only cut once the next token shows what follows it ("Sure," needs " here" to know
a space follows the comma). :meth:`tts.chunker.ClauseChunker.tentative` says what the cut
will be if an ordinary word boundary follows; :class:`EarlyChunk` starts the synthesis of
that guess at once, and the chunk's consumer takes it if the cut came out the same. One guess
per reply: a wrong one (``It costs 3.`` + ``5``) is synthesized for nothing, and its owner
counts it as wasted. Used by the speculative reply's held first chunk
(:mod:`~voice_pipeline.conversation.utterance`) and by every reply
(:mod:`~voice_pipeline.conversation.reply`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from tts.chunker import ClauseChunker

__all__ = ["EarlyChunk"]

T = TypeVar("T")


class EarlyChunk(Generic[T]):
    """At most one synthesis started on a guess of the first chunk.

    ``spawn`` starts a task in the owner's task group (so it is cancelled with it);
    ``synthesize`` makes the coroutine that synthesizes a text (it must not raise: a failed
    guess only loses the head start).
    """

    def __init__(
        self,
        spawn: Callable[[Coroutine[Any, Any, T | None]], asyncio.Task[T | None]],
        synthesize: Callable[[str], Coroutine[Any, Any, T | None]],
    ) -> None:
        self._spawn = spawn
        self._synthesize = synthesize
        self._guess: tuple[str, asyncio.Task[T | None]] | None = None
        self._taken = False

    def offer(self, chunker: ClauseChunker) -> None:
        """After a delta that cut nothing: start synthesizing the chunker's guess, if it has
        one and no guess was started yet."""
        if not self._taken and self._guess is None and (text := chunker.tentative()) is not None:
            self._guess = (text, self._spawn(self._synthesize(text)))

    async def take(self, text: str) -> T | None:
        """The first chunk is ``text``: the guess's result if it was that (waited for if still
        running), else None. No guess after this."""
        if self._taken:
            return None
        self._taken = True
        if self._guess is None or self._guess[0] != text:
            return None
        task, self._guess = self._guess[1], None
        return await task

    def lost(self) -> T | None:
        """The result of a guess that was not taken, once finished (its owner counts it as
        wasted); None if there was none, it failed or it is still running."""
        if self._guess is None or not self._guess[1].done() or self._guess[1].cancelled():
            return None
        return self._guess[1].result()
