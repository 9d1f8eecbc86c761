"""The recorded human speech (tests/data/human) and how its pauses are made longer.

The files are what their README says they are (the checksum of the samples each FLAC
decodes to, as taken from the pocketsphinx sdist); :func:`recorded_clip` keeps every
sample the speaker said, in order, and fills each longer pause with the recording's own
room tone.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import soundfile as sf
from speech import HUMAN_DIR, recording

from voice_pipeline.bench.paused import (
    RECORDED_SENTENCES,
    RECORDED_UTTERANCES,
    ROOM_TONE_S,
    Recording,
    recorded_clip,
    room_tone,
)

RATE = 16000

#: SHA-256 of each file's 16-bit little-endian samples (the README's last column)
SAMPLES_SHA256 = {
    "austen-0870.flac": "d6ae5769a7bd5312d26213a382b5c0629d7e015a8290b91dfd51b15b0e249948",
    "austen-0890.flac": "f5db1acab6b8e07eba8bb5a240311e66fa47aa818a499cca8d6b3ffdc9d31f2d",
    "austen-0920.flac": "ea5551d7cba0ace6a98a9875e2ed38791737699b1f5e81df71ae1eef4fd24606",
    "cards-005.flac": "79591cddc710272c8288f998c90baccdf39ea867ef7ef3720e32fcda2757dee9",
    "austen-0930.flac": "0faf49d5f7782e92c1600066445e2127069e6aa8cba0349715efcd3e9e0da401",
    "cards-001.flac": "4e0a744ec43b16a4fda29e9ec703308005ccc5f447021c35189bb9e95b35a698",
    "cards-003.flac": "c6218d1c54d9692892bfb96c929c7c1e7abe6f3315ed5289c9c87f569e348208",
    "forever-2.flac": "1eff9beaed266c4fb9562c5a88eb0162ee3ef34884d3400a13206b164ab60075",
    "forever-4.flac": "229b69ea22d1b13b903ee29481c8a6e4bf75a8037c01b9adae64e2c3700e27c8",
}


@pytest.mark.parametrize("rec", RECORDED_SENTENCES + RECORDED_UTTERANCES, ids=lambda r: r.file)
def test_each_recording_is_the_published_one(rec: Recording) -> None:
    pcm, rate = sf.read(HUMAN_DIR / rec.file, dtype="int16")
    assert rate == RATE and pcm.ndim == 1
    assert hashlib.sha256(pcm.astype("<i2").tobytes()).hexdigest() == SAMPLES_SHA256[rec.file]
    assert rec.file in (HUMAN_DIR / "README.md").read_text()
    # every split falls inside the recording, in order, and leaves speech on both sides
    assert all(0.2 < s < len(pcm) / rate - 0.2 for s in rec.splits_s)
    assert list(rec.splits_s) == sorted(rec.splits_s)
    assert len(rec.phrases) == len(rec.splits_s) + 1


def test_the_room_tone_is_the_quietest_stretch() -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(RATE) * 0.1).astype(np.float32)
    x[6000:8000] *= 0.01  # a quiet 125 ms
    tone = room_tone(x, RATE)
    assert len(tone) == round(ROOM_TONE_S * RATE)
    start = int(np.flatnonzero(np.isin(x, tone[:4]))[0])
    assert 6000 <= start and start + len(tone) <= 8000
    with pytest.raises(ValueError):
        room_tone(x[:100], RATE)


@pytest.mark.parametrize("rec", RECORDED_SENTENCES, ids=lambda r: r.file)
def test_a_recording_keeps_every_sample_and_gets_longer_pauses(rec: Recording) -> None:
    samples = recording(rec.file)
    pauses = [0.5 + 0.3 * i for i in range(len(rec.splits_s))]
    clip = recorded_clip(samples, RATE, rec, pauses)
    added = [round(p * RATE) for p in pauses]
    assert len(clip.samples) == len(samples) + sum(added)
    assert clip.phrases == rec.phrases and clip.pauses_s == tuple(pauses) and not clip.spliced
    tone_rms = float(np.sqrt(np.mean(room_tone(samples, RATE) ** 2)))
    kept, pos, shift = [], 0, 0
    for end, split, n in zip(clip.phrase_ends, rec.splits_s, added, strict=True):
        at = round(split * RATE)
        assert end == at + shift  # a phrase ends where the speaker's pause was split
        kept.append(clip.samples[pos + shift : end])
        filled = clip.samples[end : end + n]
        # the pause is the recording's room tone, 20 dB or more below its speech
        assert np.sqrt(np.mean(filled**2)) == pytest.approx(tone_rms, rel=0.3)
        pos, shift = at, shift + n
    kept.append(clip.samples[pos + shift :])
    np.testing.assert_array_equal(np.concatenate(kept), samples)
    assert tone_rms < 0.1 * float(np.sqrt(np.mean(samples**2)))


def test_a_recording_needs_one_pause_length_per_split() -> None:
    rec = RECORDED_SENTENCES[0]
    samples = recording(rec.file)
    with pytest.raises(ValueError, match="pauses"):
        recorded_clip(samples, RATE, rec, [0.5])
    with pytest.raises(ValueError, match="outside"):
        recorded_clip(samples[: RATE // 2], RATE, rec, [0.5, 0.5])
