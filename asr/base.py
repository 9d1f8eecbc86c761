"""The ASR stage interface.

An engine decodes a whole utterance buffer (blocking; the runtime calls it in a
worker thread). Streaming behaviour -- partial hypotheses, the LocalAgreement
commit policy, speculative final decodes -- is built on top of this in
:mod:`asr.streaming` and :mod:`asr.local_agreement`, the same for every engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True, slots=True)
class Transcription:
    text: str
    #: the words of ``text`` in order (punctuation kept attached)
    words: tuple[str, ...]
    #: seconds of audio decoded
    audio_s: float
    #: wall time the decode took, ms
    decode_ms: float


#: the utterance so far, with what came after a decode's audio was taken (None: nothing usable);
#: it raises :class:`DecodeUnwanted` once nothing will use the decode's result
MoreAudio = Callable[[], "NDArray[np.float32] | None"]


class DecodeUnwanted(Exception):
    """Raised by a :data:`MoreAudio` when the decode's result will not be used (the speaker went
    on before the turn ended): the engine stops instead of taking its costlier path."""


class ASREngine(Protocol):
    sample_rate_hz: int

    def transcribe(self, audio: NDArray[np.float32], *, more: MoreAudio | None = None) -> Transcription:
        """Decode mono float32 audio at ``sample_rate_hz``. Thread-safe; blocking.

        ``more`` is given when the utterance is still being recorded (the decode made at
        the start of a pause, whose audio is silence until the speaker goes on): it returns
        the utterance with the audio that came since, or None when there is none to use.
        An engine whose usual decode of ``audio`` is doubtful may decode that instead of
        taking a costlier path (a cut at the first silent frame can end inside the last
        word's soft ending); it may ask ``more()`` before any costly step (its turn on the
        model, a costlier path): that raises :class:`DecodeUnwanted` when nothing will use the
        result, and the decode stops there."""
        ...

    def transcribe_partial(self, audio: NDArray[np.float32]) -> Transcription | None:
        """A preview of an utterance still being spoken (cut anywhere, often mid-word): as
        :meth:`transcribe`, or None when this preview would cost more than a usual decode
        (the caller then has no partial this time). Thread-safe; blocking."""
        ...

    def close(self) -> None: ...
