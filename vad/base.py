"""The VAD stage interface: a model that scores fixed-size frames for speech.

An engine (``SileroVAD``, ``WebRTCVAD``) is built once and shared; each session
gets its own :class:`VADStream` (engines keep per-stream state, e.g. Silero's RNN
state and 64-sample context). Turning probabilities into turns is the job of the
pure :class:`vad.endpointer.Endpointer`, not of the engine.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import NDArray


class VADStream(Protocol):
    """Per-session scorer. Buffers partial frames internally."""

    #: samples per scored frame (Silero: 512 @16 kHz / 256 @8 kHz; WebRTC: 10/20/30 ms)
    frame_samples: int

    def push(self, samples: NDArray[np.float32]) -> list[float]:
        """Add mono float32 samples in [-1, 1]; return one speech probability in [0, 1]
        for every frame completed by them (possibly none), oldest first."""
        ...

    def reset(self) -> None:
        """Forget model state and any buffered partial frame."""
        ...


class VAD(Protocol):
    sample_rate_hz: int
    frame_samples: int

    def stream(self) -> VADStream: ...

    def close(self) -> None: ...
