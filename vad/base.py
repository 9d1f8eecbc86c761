"""The VAD stage interface: a model that scores fixed-size frames for speech.

An engine (``SileroVAD``, ``WebRTCVAD``) is built once and shared; each session
gets its own :class:`VADStream` (engines keep per-stream state, e.g. Silero's RNN
state and 64-sample context). Turning probabilities into turns is the job of the
pure :class:`vad.endpointer.Endpointer`, not of the engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from voice_pipeline.errors import AudioInputError


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


class ModelStopped(Exception):
    """A blocking model call was stopped by its :class:`StopSignal`."""


class StopSignal:
    """Stops a blocking model call in a worker thread from another thread (thread-safe).

    The caller keeps it and calls :meth:`stop` (a cancelled wait does not stop a thread);
    the engine says how it stops (:meth:`on_stop`) and raises :class:`ModelStopped`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopped = False
        self._hooks: list[Callable[[], None]] = []

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    def on_stop(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` (from the thread that stops) on :meth:`stop`; at once if stopped."""
        with self._lock:
            if not self._stopped:
                self._hooks.append(hook)
                return
        hook()


class TurnModel(Protocol):
    """An audio turn-completion model (``SmartTurn``): does the utterance sound finished?

    One instance serves every session; :meth:`p_complete` is blocking and thread-safe
    (the session calls it from a worker thread at each pause)."""

    sample_rate_hz: int

    def p_complete(self, audio: NDArray[np.float32], *, stop: StopSignal | None = None) -> float:
        """P(complete) in [0, 1] of the utterance ``audio`` (mono float32 at ``sample_rate_hz``).

        Raises :class:`ModelStopped` once ``stop`` is stopped (speech resumed: the verdict
        is void, and the model would take a core from the decode of the next pause)."""
        ...

    def close(self) -> None: ...


class FrameSplitter:
    """Cuts a stream of arbitrary-length chunks into whole frames, keeping the remainder."""

    def __init__(self, frame_samples: int) -> None:
        self.frame_samples = frame_samples
        self._pending = np.zeros(0, dtype=np.float32)

    def split(self, samples: NDArray[np.float32]) -> NDArray[np.float32]:
        """Every whole frame completed by ``samples``, concatenated (a multiple of the frame size)."""
        audio = np.asarray(samples, dtype=np.float32)
        if audio.ndim != 1:
            raise AudioInputError(f"VAD expects mono 1-D audio, got shape {audio.shape}")
        if self._pending.size:
            audio = np.concatenate((self._pending, audio))
        usable = audio.size - audio.size % self.frame_samples
        self._pending = audio[usable:].copy()
        return audio[:usable]

    def reset(self) -> None:
        self._pending = np.zeros(0, dtype=np.float32)
