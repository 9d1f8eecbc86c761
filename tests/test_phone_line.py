"""The phone line the benchmarks put speech through (pure): 8 kHz G.711 µ-law and back."""

from __future__ import annotations

import numpy as np

from voice_pipeline.bench.paused import PHONE_RATE_HZ, phone_line

RATE = 16000


def tone(hz: float, seconds: float = 1.0, level: float = 0.3) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (level * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def level_at(samples: np.ndarray, hz: float) -> float:
    """The amplitude of the ``hz`` component (a whole number of cycles in one second)."""
    spectrum = np.abs(np.fft.rfft(samples[:RATE])) * 2 / RATE
    return float(spectrum[round(hz)])


def test_the_line_keeps_the_telephone_band_and_drops_what_is_above_it() -> None:
    both = tone(1000) + tone(6000)
    heard = phone_line(both, RATE)
    assert heard.dtype == np.float32 and len(heard) == len(both)
    assert abs(level_at(heard, 1000) - 0.3) < 0.02  # within the band, the level is kept
    assert level_at(heard, 6000) < 0.003  # above 4 kHz (8 kHz sampling): gone
    assert PHONE_RATE_HZ == 8000


def test_the_line_codes_each_sample_in_8_bits_and_silence_stays_silence() -> None:
    quiet = tone(440, level=0.01)
    heard = phone_line(quiet, RATE)
    error = heard[RATE // 10 : -RATE // 10] - quiet[RATE // 10 : -RATE // 10]
    snr_db = 10 * np.log10(np.mean(quiet**2) / np.mean(error**2))
    assert 20 < snr_db < 60  # µ-law's quantisation noise, not a lossless copy
    silence = np.zeros(RATE // 2, np.float32)
    assert not np.any(phone_line(silence, RATE))  # a muted line is digital silence


def test_the_line_clips_what_is_too_loud_instead_of_wrapping() -> None:
    loud = tone(500, level=1.5)
    heard = phone_line(loud, RATE)
    assert float(np.max(np.abs(heard))) < 1.1
    assert np.corrcoef(heard[800:-800], np.clip(loud, -1, 1)[800:-800])[0, 1] > 0.95
