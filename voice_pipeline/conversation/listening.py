"""The session's input side: the microphone's recent history, the VAD, and the echo check.

:class:`Listener` owns what one conversation knows of its input audio: the recent
samples with the time each was captured (:class:`~voice_pipeline.inputbuf.InputHistory`:
pre-roll, sample -> time), the streaming VAD, and the
:class:`~voice_pipeline.turntaking.echo.EchoGate` that keeps the assistant's own voice
coming back from counting as the user's speech. It turns input chunks into
:class:`Frame` s for the turn machine and decides nothing about turns; the session
routes each frame to :meth:`voice_pipeline.turntaking.machine.TurnMachine.frame`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from vad.base import VAD
from voice_pipeline.audio import finite_audio, last_sound_end
from voice_pipeline.config import BargeInConfig
from voice_pipeline.inputbuf import InputHistory
from voice_pipeline.turntaking.echo import EchoGate

HISTORY_S = 4.0  # recent input kept for pre-roll, sample->time lookups and the echo check
END_SEARCH_S = 0.3  # how far before the VAD's end of speech to look for the acoustic end


@dataclass(frozen=True, slots=True)
class Frame:
    """One VAD frame of input, as the turn machine takes it."""

    #: speech probability (0 when it is the assistant's own voice coming back)
    prob: float
    #: when the frame's first sample was captured
    start_ns: int
    #: whether speech starting at a time (ns) is the assistant's echo
    is_echo: Callable[[int], bool]


class Listener:
    def __init__(self, vad: VAD, barge_in: BargeInConfig, rate_hz: int, clock: Callable[[], int]) -> None:
        self.rate_hz = rate_hz
        self.input = InputHistory(rate_hz, HISTORY_S, clock)
        self.echo = EchoGate(barge_in, rate_hz, self.input, clock())
        self._vad = vad.stream()
        self._frame = vad.frame_samples
        self._vad_end = 0  # end sample of the last VAD frame

    def record(self, samples: NDArray[np.float32], t_ns: int) -> NDArray[np.float32]:
        """Keep a chunk whose last sample was captured at ``t_ns``; returns it cleaned."""
        samples = finite_audio(samples)  # one NaN would corrupt the VAD's recurrent state
        self.input.append(samples, t_ns)
        return samples

    def frames(self, samples: NDArray[np.float32], neg_threshold: float) -> Iterator[Frame]:
        """The VAD frames a recorded chunk completes (a probability of at least
        ``neg_threshold`` is checked against the echo)."""
        for prob in self._vad.push(samples):
            self._vad_end += self._frame
            end = self._vad_end
            if prob >= neg_threshold and self.echo.is_echo(end):
                prob = 0.0  # the assistant's own voice coming back
            yield Frame(
                prob,
                start_ns=self.input.time_of(end - self._frame),
                is_echo=functools.partial(self.echo.speech_is_echo, mic_end=end),
            )

    def acoustic_end(self, vad_end: int) -> int:
        """The VAD's last voiced frame ends 40-100 ms after the sound does (model
        hangover); look at the level of the audio before it for the true end."""
        start = max(0, vad_end - int(END_SEARCH_S * self.rate_hz))
        end = last_sound_end(self.input.since(start)[: vad_end - start], self.rate_hz)
        return vad_end if end is None else min(vad_end, start + end)
