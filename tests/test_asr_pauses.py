"""Long inner silences shortened before decoding (asr/pauses.py): pure, on synthetic signals."""

from __future__ import annotations

import numpy as np
import pytest

from asr.pauses import shorten_pauses, silent_runs

RATE = 16000


def tone(s: float, amp: float = 0.3) -> np.ndarray:
    t = np.arange(round(s * RATE)) / RATE
    return (amp * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def quiet(s: float, level: float = 0.0, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(round(s * RATE)) * level).astype(np.float32)


def test_a_long_pause_is_shortened_and_the_speech_kept() -> None:
    audio = np.concatenate([quiet(0.5), tone(0.5), quiet(1.2), tone(0.4), quiet(0.8)])
    out = shorten_pauses(audio, RATE, 0.3)
    # the inner pause went from 1.2 to 0.3 s; the edges (before and after the speech) stay
    assert len(out) == len(audio) - round(0.9 * RATE)
    assert np.array_equal(out[: round(1.0 * RATE)], audio[: round(1.0 * RATE)])
    assert np.array_equal(out[-round(1.2 * RATE) :], audio[-round(1.2 * RATE) :])
    loud = np.abs(out) > 0.01
    assert loud.sum() == (np.abs(audio) > 0.01).sum()  # every voiced sample survives


@pytest.mark.parametrize("pause_s", [0.1, 0.3])
def test_short_pauses_are_left_alone(pause_s: float) -> None:
    audio = np.concatenate([tone(0.5), quiet(pause_s), tone(0.5)])
    assert shorten_pauses(audio, RATE, 0.3) is audio


def test_over_a_noise_floor_nothing_is_silence() -> None:
    """Noise 30 dB under the speech is within the 40 dB range: nothing is cut (the safe side)."""
    floor = 0.3 / np.sqrt(2) * 10 ** (-30 / 20)
    audio = np.concatenate([tone(0.5), quiet(1.0, floor), tone(0.5)]) + quiet(2.0, floor, seed=1)
    assert silent_runs(audio.astype(np.float32), RATE, 0.3) == []
    assert len(shorten_pauses(audio.astype(np.float32), RATE, 0.3)) == len(audio)


def test_off_and_degenerate_inputs() -> None:
    audio = np.concatenate([tone(0.5), quiet(1.0), tone(0.5)])
    assert shorten_pauses(audio, RATE, 0.0) is audio
    assert shorten_pauses(np.zeros(0, np.float32), RATE, 0.3).size == 0
    silence = np.zeros(RATE, np.float32)
    assert shorten_pauses(silence, RATE, 0.3) is silence  # nothing loud: no inner pause


def test_several_pauses() -> None:
    audio = np.concatenate([tone(0.3), quiet(0.6), tone(0.3), quiet(0.9), tone(0.3)])
    runs = silent_runs(audio, RATE, 0.3)
    assert len(runs) == 2
    assert len(shorten_pauses(audio, RATE, 0.2)) == round((0.3 * 3 + 0.2 * 2) * RATE)
