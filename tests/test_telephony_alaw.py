"""G.711 A-law against the standard's reference algorithm (CPython's audioop, test-only)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from voice_pipeline.telephony import alaw

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop  # the reference; deprecated, gone in 3.13: never used by the product


def test_decode_all_256_codes() -> None:
    codes = bytes(range(256))
    reference = np.frombuffer(audioop.alaw2lin(codes, 2), dtype="<i2")
    assert np.array_equal(alaw.decode(codes), reference)


def test_encode_all_65536_inputs() -> None:
    pcm = np.arange(-32768, 32768, dtype=np.int16)
    reference = audioop.lin2alaw(pcm.astype("<i2").tobytes(), 2)
    assert alaw.encode(pcm) == reference


@pytest.mark.parametrize(
    ("sample", "code"),
    [
        (0, 0xD5),  # the idle pattern of an A-law line (positive zero)
        (-1, 0x55),  # negative zero
        (7, 0xD5),  # below the first step (13-bit value 0)
        (8, 0xD5),  # 13-bit 1: mantissa (1 >> 1) = 0 in segment 0
        (16, 0xD4),  # 13-bit 2: mantissa 1, even bits inverted
        (4096, 0x85),  # 13-bit 512: first value of segment 5, mantissa 0
        (32767, 0xAA),  # largest positive code
        (-32768, 0x2A),  # largest negative code
    ],
)
def test_known_codes(sample: int, code: int) -> None:
    assert alaw.encode(np.array([sample], dtype=np.int16)) == bytes([code])


def test_every_code_round_trips() -> None:
    codes = bytes(range(256))
    assert alaw.encode(alaw.decode(codes)) == codes  # A-law has no second zero


def test_decoded_values_are_monotonic_in_magnitude() -> None:
    # positive codes (sign bit set after un-inverting) grow with segment and mantissa
    codes = bytes(((seg << 4) | m | 0x80) ^ 0x55 for seg in range(8) for m in range(16))
    positive = list(alaw.decode(codes))
    assert positive == sorted(positive) and positive[0] == 8 and positive[-1] == 32256


def test_empty() -> None:
    assert alaw.encode(np.zeros(0, dtype=np.int16)) == b""
    assert len(alaw.decode(b"")) == 0
