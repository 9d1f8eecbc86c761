"""G.711 µ-law against the standard's reference algorithm (CPython's audioop, test-only)."""

from __future__ import annotations

import warnings

import numpy as np

from voice_pipeline.telephony import mulaw

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop  # the reference; deprecated, gone in 3.13: never used by the product


def test_decode_all_256_codes() -> None:
    codes = bytes(range(256))
    reference = np.frombuffer(audioop.ulaw2lin(codes, 2), dtype="<i2")
    assert np.array_equal(mulaw.decode(codes), reference)


def test_encode_all_65536_inputs() -> None:
    pcm = np.arange(-32768, 32768, dtype=np.int16)
    reference = audioop.lin2ulaw(pcm.astype("<i2").tobytes(), 2)
    assert mulaw.encode(pcm) == reference


def test_round_trip_is_stable() -> None:
    codes = bytes(range(256))
    again = mulaw.encode(mulaw.decode(codes))
    # 0x7f and 0xff both decode to 0 (negative and positive zero); 0 encodes as 0xff
    expected = bytes(0xFF if c == 0x7F else c for c in codes)
    assert again == expected


def test_empty() -> None:
    assert mulaw.encode(np.zeros(0, dtype=np.int16)) == b""
    assert len(mulaw.decode(b"")) == 0
