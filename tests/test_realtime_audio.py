"""The Realtime audio formats: coding, the streaming input decoder (chunking never changes
the samples, so chunk boundaries cannot click), and the output encoder."""

from __future__ import annotations

import numpy as np
import pytest

from voice_pipeline.realtime.audio import (
    AudioFormat,
    InputDecoder,
    OutputEncoder,
    decode,
    encode,
    format_json,
)

PIPELINE_HZ = 16000


def tone(rate_hz: int, seconds: float = 1.0, hz: float = 440.0, level: float = 0.3) -> np.ndarray:
    t = np.arange(int(rate_hz * seconds)) / rate_hz
    return (level * np.sin(2 * np.pi * hz * t) * 32767).astype(np.int16)


def peak_hz(samples: np.ndarray, rate_hz: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64) * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate_hz)[int(np.argmax(spectrum))])


@pytest.mark.parametrize(
    ("fmt", "rate", "width", "wire"),
    [
        (AudioFormat.PCM, 24000, 2, {"type": "audio/pcm", "rate": 24000}),
        (AudioFormat.PCMU, 8000, 1, {"type": "audio/pcmu"}),
        (AudioFormat.PCMA, 8000, 1, {"type": "audio/pcma"}),
    ],
)
def test_formats(fmt: AudioFormat, rate: int, width: int, wire: dict[str, object]) -> None:
    assert (fmt.rate_hz, fmt.bytes_per_sample, format_json(fmt)) == (rate, width, wire)
    assert fmt.duration_ms(rate * width // 2) == 500


def test_pcm_is_little_endian_and_lossless() -> None:
    pcm = np.array([1, -2, 32767, -32768], dtype=np.int16)
    assert encode(AudioFormat.PCM, pcm) == b"\x01\x00\xfe\xff\xff\x7f\x00\x80"
    assert np.array_equal(decode(AudioFormat.PCM, encode(AudioFormat.PCM, pcm)), pcm)


@pytest.mark.parametrize("fmt", [AudioFormat.PCMU, AudioFormat.PCMA])
def test_g711_round_trip_is_close(fmt: AudioFormat) -> None:
    pcm = tone(8000)
    back = decode(fmt, encode(fmt, pcm)).astype(np.int32)
    assert len(encode(fmt, pcm)) == len(pcm)
    # G.711's quantization error is at most about 3 % of the sample's magnitude (+ one step)
    assert np.all(np.abs(back - pcm) <= 0.035 * np.abs(pcm.astype(np.int32)) + 16)


@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_input_chunking_never_changes_the_samples(fmt: AudioFormat) -> None:
    data = encode(fmt, tone(fmt.rate_hz))
    whole = InputDecoder(fmt, PIPELINE_HZ).decode(data)
    decoder = InputDecoder(fmt, PIPELINE_HZ)
    rng = np.random.default_rng(7)
    pieces, at = [], 0
    while at < len(data):
        n = int(rng.integers(1, 1500))  # odd sizes too: PCM16 samples split across appends
        pieces.append(decoder.decode(data[at : at + n]))
        at += n
    chunked = np.concatenate(pieces)
    assert np.array_equal(chunked, whole)
    assert decoder.samples_in == fmt.rate_hz and decoder.ms_in == 1000.0


@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_input_in_20_ms_chunks_has_no_clicks(fmt: AudioFormat) -> None:
    data = encode(fmt, tone(fmt.rate_hz))
    step = fmt.rate_hz // 50 * fmt.bytes_per_sample
    decoder = InputDecoder(fmt, PIPELINE_HZ)
    out = np.concatenate([decoder.decode(data[i : i + step]) for i in range(0, len(data), step)])
    assert abs(len(out) - PIPELINE_HZ) < 600  # the resampler holds back a few ms
    steady = out[800:]
    largest_step = 0.3 * 2 * np.pi * 440 / PIPELINE_HZ  # of a 440 Hz sine at 0.3 and 16 kHz
    assert np.max(np.abs(np.diff(steady))) < 1.1 * largest_step
    assert peak_hz(steady, PIPELINE_HZ) == pytest.approx(440, abs=3)


def test_input_odd_byte_waits_for_its_pair() -> None:
    decoder = InputDecoder(AudioFormat.PCM, 24000)  # no resampling: samples come out at once
    assert len(decoder.decode(b"\x01")) == 0
    out = decoder.decode(b"\x00\x02\x00")
    assert np.array_equal(out, np.array([1, 2], dtype=np.float32) / 32768) and decoder.samples_in == 2


@pytest.mark.parametrize(
    ("fmt", "source_hz"), [(AudioFormat.PCM, 22050), (AudioFormat.PCMU, 22050), (AudioFormat.PCMA, 16000)]
)
def test_output_encoder_resamples_whole_clauses(fmt: AudioFormat, source_hz: int) -> None:
    encoder = OutputEncoder(fmt, source_hz)
    wire = encoder.encode(tone(source_hz, 0.5)) + encoder.encode(tone(source_hz, 0.5))
    assert encoder.samples_out == len(wire) // fmt.bytes_per_sample
    assert abs(encoder.samples_out - fmt.rate_hz) <= 2
    assert peak_hz(decode(fmt, wire), fmt.rate_hz) == pytest.approx(440, abs=3)


def test_output_at_the_wire_rate_is_only_coded() -> None:
    pcm = tone(24000, 0.1)
    assert OutputEncoder(AudioFormat.PCM, 24000).encode(pcm) == pcm.astype("<i2").tobytes()
