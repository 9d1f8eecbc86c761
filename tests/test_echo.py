"""The echo check (pure): how much of a microphone window the played reference explains."""

from __future__ import annotations

import numpy as np
import pytest
import soxr
from numpy.typing import NDArray

from voice_pipeline.turntaking.echo import echo_residual_db

RATE = 16000
N = 2048  # 128 ms, the session's window
MAX_LAG = 6400  # 400 ms


def speech_like(n: int, seed: int) -> NDArray[np.float32]:
    """Band-limited noise with a syllable-rate envelope (not periodic, like speech)."""
    rng = np.random.default_rng(seed)
    noise = np.convolve(rng.standard_normal(n + 31), np.hanning(32) / 16, mode="valid")[:n]
    t = np.arange(n) / RATE
    envelope = 0.6 + 0.4 * np.sin(2 * np.pi * 4.0 * t + seed)
    out = noise * envelope
    scaled: NDArray[np.float32] = (0.1 * out / np.sqrt(np.mean(out * out))).astype(np.float32)
    return scaled


def echo_of(reference: NDArray[np.float32], delay: int, gain: float) -> NDArray[np.float32]:
    """What the microphone hears: ``reference`` played ``delay`` samples ago, scaled.

    ``reference[MAX_LAG + i]`` plays at the moment ``mic[i]`` is captured.
    """
    return (gain * reference[MAX_LAG - delay : MAX_LAG - delay + N]).astype(np.float32)


REF = speech_like(N + MAX_LAG, seed=1)
USER = speech_like(N, seed=2)


@pytest.mark.parametrize("delay", [0, 1, 1600, 4000, MAX_LAG])
@pytest.mark.parametrize("gain", [1.0, 0.5, 0.05])
def test_a_delayed_scaled_copy_is_echo(delay: int, gain: float) -> None:
    assert echo_residual_db(echo_of(REF, delay, gain), REF, MAX_LAG) < -40.0


def test_an_inverted_echo_is_echo() -> None:
    """Loudspeaker or amplifier polarity inversion: the least-squares gain is negative."""
    assert echo_residual_db(echo_of(REF, 1600, -0.5), REF, MAX_LAG) < -40.0


def test_echo_plus_speech_at_the_same_level_is_about_minus_3_db() -> None:
    echo = echo_of(REF, 1600, 0.5)
    user = USER * np.float32(np.sqrt(np.mean(echo.astype(np.float64) ** 2) / np.mean(USER**2)))
    assert echo_residual_db(echo + user, REF, MAX_LAG) == pytest.approx(-3.0, abs=1.0)


def fractional_echo(reference: NDArray[np.float32], delay: float, gain: float) -> NDArray[np.float32]:
    """``echo_of`` for a delay between samples (band-limited shift, done in frequency)."""
    spec = np.fft.rfft(reference.astype(np.float64))
    k = np.arange(len(spec))
    shifted = np.fft.irfft(spec * np.exp(-2j * np.pi * k * delay / len(reference)), len(reference))
    return (gain * shifted[MAX_LAG : MAX_LAG + N]).astype(np.float32)


def hiss(n: int, seed: int) -> NDArray[np.float32]:
    """Fricatives: white noise at Piper's 22050 Hz, resampled to the pipeline's rate as the
    reply is -- energy up to the band edge, where a half-sample offset turns the phase."""
    white = np.random.default_rng(seed).standard_normal(n * 22050 // RATE + 64)
    out = soxr.resample(white, 22050, RATE, quality="HQ")[:n]
    return (0.05 * out / np.std(out)).astype(np.float32)


HISS = hiss(N + MAX_LAG, seed=4)


@pytest.mark.parametrize("reference", [REF, HISS], ids=["voiced", "hiss"])
@pytest.mark.parametrize("delay", [8.5, 1600.3, 4000.5])
def test_an_echo_delayed_between_samples_is_echo(reference: NDArray[np.float32], delay: float) -> None:
    """A real echo path's delay is no whole number of samples, and the listener's
    resampler and the reference's need not agree on the phase; one sample-aligned copy
    then explains little of a hiss."""
    assert echo_residual_db(fractional_echo(reference, delay, 0.5), reference, MAX_LAG) < -15.0


def test_a_short_filter_does_not_explain_the_user() -> None:
    assert echo_residual_db(USER, HISS, MAX_LAG) > -1.0
    echo = fractional_echo(HISS, 1600.5, 0.5)
    user = USER * np.float32(np.sqrt(np.mean(echo.astype(np.float64) ** 2) / np.mean(USER**2)))
    assert echo_residual_db(echo + user, HISS, MAX_LAG) == pytest.approx(-3.0, abs=1.0)


def test_speech_alone_is_not_explained() -> None:
    assert echo_residual_db(USER, REF, MAX_LAG) > -1.0


def test_echo_delayed_beyond_max_lag_is_not_found() -> None:
    late = speech_like(N + 2 * MAX_LAG, seed=3)
    mic = (0.5 * late[:N]).astype(np.float32)  # played 2 * MAX_LAG ago
    assert echo_residual_db(mic, late[MAX_LAG:], MAX_LAG) > -1.0


def test_a_quiet_reference_still_explains_its_own_echo() -> None:
    quiet = (REF * np.float32(0.01)).astype(np.float32)  # about -60 dBFS, above the silence floor
    assert echo_residual_db(echo_of(quiet, 800, 1.0), quiet, MAX_LAG) < -40.0


@pytest.mark.parametrize("mic", [USER, np.zeros(N, dtype=np.float32)])
def test_silent_reference_is_zero(mic: NDArray[np.float32]) -> None:
    assert echo_residual_db(mic, np.zeros(N + MAX_LAG, dtype=np.float32), MAX_LAG) == 0.0


def test_silent_microphone_is_zero() -> None:
    assert echo_residual_db(np.zeros(N, dtype=np.float32), REF, MAX_LAG) == 0.0


@pytest.mark.parametrize(
    ("n_mic", "n_ref"), [(N, N + MAX_LAG - 1), (N, N + MAX_LAG + 1), (N, N), (0, MAX_LAG)]
)
def test_wrong_reference_length_raises(n_mic: int, n_ref: int) -> None:
    reference = np.resize(REF, n_ref)
    assert len(reference) == n_ref
    with pytest.raises(ValueError):
        echo_residual_db(USER[:n_mic], reference, MAX_LAG)


def test_zero_max_lag() -> None:
    assert echo_residual_db(REF[:N] * np.float32(0.3), REF[:N], 0) < -40.0
    assert echo_residual_db(USER, REF[:N], 0) > -1.0
