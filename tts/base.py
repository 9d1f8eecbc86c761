"""The TTS stage interface: synthesize one clause of text to PCM.

Clause splitting of the LLM's token stream is the pure
:class:`tts.chunker.ClauseChunker`; the runtime synthesizes each clause as soon as
it is complete, in a worker thread, while earlier clauses play.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray


class TTS(Protocol):
    sample_rate_hz: int
    #: the voice's name, as a client chooses it (``/v1/realtime`` announces it)
    voice: str

    def synthesize(self, text: str) -> NDArray[np.int16]:
        """Mono int16 audio at ``sample_rate_hz`` for ``text``. Blocking; thread-safe."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class HeadFirst:
    """A chunk's audio in two parts (:mod:`tts.head_first`): ``head`` now, ``rest()``
    (blocking; call it from a thread) for the remainder."""

    head: NDArray[np.int16]
    #: None: ``head`` is the whole chunk
    rest: Callable[[], NDArray[np.int16]] | None = None
    #: about what ``rest()`` will return, in samples (before its trailing silence is trimmed)
    rest_samples: int = 0


def synthesize_head(tts: TTS, text: str) -> HeadFirst:
    """``text`` with its first fraction of a second ready first, if the engine can
    (``synthesize_head``, as :class:`tts.piper.PiperTTS`); else the whole chunk at once."""
    head_first: Callable[[str], HeadFirst] | None = getattr(tts, "synthesize_head", None)
    return head_first(text) if head_first is not None else HeadFirst(tts.synthesize(text))
