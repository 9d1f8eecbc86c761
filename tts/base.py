"""The TTS stage interface: synthesize one clause of text to PCM.

Clause splitting of the LLM's token stream is the pure
:class:`tts.chunker.ClauseChunker`; the runtime synthesizes each clause as soon as
it is complete, in a worker thread, while earlier clauses play.
"""

from __future__ import annotations

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
