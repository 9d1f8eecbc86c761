"""Tell the assistant's own voice coming back into the microphone from the user's (pure).

Without acoustic echo cancellation on the client (file mode, telephony, a CLI on
speakers) the microphone hears the assistant's reply again, delayed and
attenuated. The server knows exactly what it sent, so for a window of
microphone audio it looks for the delay (0..``max_lag``) at which the sent
reference best explains the window, fits the gain by least squares, and
reports how much energy is left once that delayed reference, through a short
filter fitted by least squares around the delay, is subtracted
(:func:`echo_residual_db`). The filter, not one gain: a real echo's delay is no
whole number of samples, and the listener's resampler and the reference's need
not agree on the phase; one sample-aligned copy then explains little of a hiss
("s", "f"), and the assistant's own fricatives were heard as the user. Close to 0 dB: the reference explains
nothing (the user is speaking, or nothing was playing). Strongly negative:
the window is the assistant's own voice.

Limits: one delay and a short filter -- a linear, single-path echo. Real rooms add
reverberation and loudspeaker distortion that leave a larger residual; such
echo is then caught later, when its transcript turns out to repeat the
assistant's own words (:mod:`voice_pipeline.turntaking.bargein`). Clients with their own
echo cancellation (browsers with ``echoCancellation``) need neither.

:class:`EchoGate` keeps one session's reference and applies the check to its input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from voice_pipeline.audio import resample_int16, to_float32
from voice_pipeline.playout import Playout

if TYPE_CHECKING:
    from voice_pipeline.config import BargeInConfig
    from voice_pipeline.inputbuf import InputHistory

_SILENT = 1e-7  # mean square below this is treated as silence (about -70 dBFS)
#: taps of the filter fitted around the best delay (+-4 samples: a fractional delay and
#: a loudspeaker's mild colouring; far too few to explain a 128 ms window of the user)
ECHO_TAPS = 9


def echo_residual_db(mic: NDArray[np.float32], reference: NDArray[np.float32], max_lag: int) -> float:
    """Residual-to-microphone energy ratio (dB) after removing the best single-path echo.

    ``mic`` is a window of ``n`` samples; ``reference`` is what was played over
    the same span extended ``max_lag`` samples into the past: ``n + max_lag``
    samples, aligned so that ``reference[max_lag + i]`` played at the moment
    ``mic[i]`` was captured. Returns 0.0 when either signal is silent.
    """
    n = len(mic)
    if n == 0 or len(reference) != n + max_lag:
        raise ValueError("reference must cover the window plus max_lag samples")
    x = mic.astype(np.float64)
    r = reference.astype(np.float64)
    e_mic = float(np.dot(x, x))
    if e_mic / n < _SILENT or float(np.dot(r, r)) / len(r) < _SILENT:
        return 0.0
    # c[j] = sum_i x[i] * r[j + i] for j = 0..max_lag (echo delay = max_lag - j)
    size = 1 << int(np.ceil(np.log2(n + len(r))))
    spec = np.fft.rfft(r, size) * np.conj(np.fft.rfft(x, size))
    c = np.fft.irfft(spec, size)[: max_lag + 1]
    # energy of each reference segment r[j : j + n]
    cum = np.concatenate([[0.0], np.cumsum(r * r)])
    e_ref = cum[n : n + max_lag + 1] - cum[: max_lag + 1]
    explained = np.where(e_ref > _SILENT * n, np.square(c) / np.maximum(e_ref, 1e-30), 0.0)
    best = int(explained.argmax())
    residual = min(e_mic - float(explained[best]), _filtered_residual(x, r, best, max_lag))
    return float(10.0 * np.log10(max(residual, e_mic * 1e-6) / e_mic))


def _filtered_residual(x: NDArray[np.float64], r: NDArray[np.float64], best: int, max_lag: int) -> float:
    """Energy of ``x`` left after the least-squares filter of :data:`ECHO_TAPS` taps on
    the reference segments around ``r[best : best + len(x)]``."""
    n, half = len(x), ECHO_TAPS // 2
    taps = range(max(0, best - half), min(max_lag, best + half) + 1)
    a = np.stack([r[j : j + n] for j in taps], axis=1)
    g, *_ = np.linalg.lstsq(a, x, rcond=None)
    e = x - a @ g
    return float(np.dot(e, e))


class EchoGate:
    """One session's echo check: what the listener was sent (the reference, on a timeline
    of pipeline-rate samples since ``t0_ns``) against the recent microphone input."""

    #: microphone window compared with what was played, per VAD frame
    WINDOW_S = 0.128
    #: reference kept
    KEEP_S = 10.0

    def __init__(self, cfg: BargeInConfig, rate_hz: int, mic: InputHistory, t0_ns: int) -> None:
        self._cfg = cfg
        self._rate = rate_hz
        self._mic = mic
        self._t0 = t0_ns
        self.reference = Playout(rate_hz)

    def _pos(self, t_ns: int) -> int:
        return round((t_ns - self._t0) * self._rate / 1e9)

    def sent(self, turn_id: int, pcm: NDArray[np.int16], rate_hz: int, now_ns: int) -> None:
        """Reply audio at ``rate_hz`` was handed to the listener at ``now_ns``."""
        now = self._pos(now_ns)
        self.reference.send(turn_id, resample_int16(pcm, rate_hz, self._rate), now)
        self.reference.forget_before(now - int(self.KEEP_S * self._rate))

    def cleared(self, turn_id: int, now_ns: int) -> None:
        self.reference.clear(turn_id, self._pos(now_ns))

    def is_echo(self, mic_end: int, window_s: float = WINDOW_S) -> bool:
        """Is the microphone audio before input sample ``mic_end`` the assistant's own voice?"""
        if not self._cfg.echo_suppression:
            return False
        n = int(window_s * self._rate)
        mic = self._mic.window(mic_end, n)
        if mic is None:
            return False
        end = self._pos(self._mic.time_of(mic_end))
        lag = self._cfg.echo_max_delay_ms * self._rate // 1000
        ref = to_float32(self.reference.window(end - n - lag, end))
        return echo_residual_db(mic, ref, lag) < self._cfg.echo_residual_db

    def speech_is_echo(self, onset_ns: int, mic_end: int) -> bool:
        """Is the speech since ``onset_ns`` (up to 1 s of it, up to ``mic_end``) echo?"""
        span = (self._mic.time_of(mic_end) - onset_ns) / 1e9
        return self.is_echo(mic_end, min(1.0, max(span, self.WINDOW_S)))
