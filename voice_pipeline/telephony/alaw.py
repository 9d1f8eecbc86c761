"""G.711 A-law, bit-exact to the standard, in numpy (no ``audioop``: gone in Python 3.13).

The algorithm is the reference one of ITU-T G.711 as implemented in Sun's
``g711.c`` (and so in CPython's ``audioop.lin2alaw``/``alaw2lin``): the 16-bit
sample is reduced to 13 bits (negative values to their one's complement
magnitude), coded as a sign bit, a 3-bit segment and a 4-bit mantissa, and the
even bits are inverted (XOR 0x55; the sign bit is set for positive samples).
Decoding uses a 256-entry table built from the standard's expansion formula.
The API is the one of :mod:`voice_pipeline.telephony.mulaw`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

#: largest 13-bit magnitude of each segment
_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32)


def _build_decode_table() -> NDArray[np.int16]:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    seg = (a & 0x70) >> 4
    t = (a & 0x0F) << 4
    t = np.where(seg == 0, t + 8, t + 0x108)
    t = np.where(seg > 1, t << np.maximum(seg - 1, 0), t)
    return np.where(a & 0x80, t, -t).astype(np.int16)


#: A-law byte -> 16-bit linear sample
DECODE_TABLE: NDArray[np.int16] = _build_decode_table()
DECODE_TABLE.setflags(write=False)


def encode(pcm: NDArray[np.int16]) -> bytes:
    """16-bit linear samples -> A-law bytes (one per sample)."""
    val = np.asarray(pcm, dtype=np.int16).astype(np.int32) >> 3  # 13-bit, floor like C's >>
    negative = val < 0
    mag = np.where(negative, -val - 1, val)
    mask = np.where(negative, 0x55, 0xD5)
    # segment = index of the first segment end >= mag; 8 = beyond the last (coded as 0x7f)
    seg = np.searchsorted(_SEG_END, mag).astype(np.int32)
    mantissa = np.where(seg < 2, mag >> 1, mag >> np.maximum(seg, 1)) & 0x0F
    code = np.where(seg >= 8, 0x7F, (np.minimum(seg, 7) << 4) | mantissa)
    return bytes((code ^ mask).astype(np.uint8).tobytes())


def decode(data: bytes) -> NDArray[np.int16]:
    """A-law bytes -> 16-bit linear samples."""
    return DECODE_TABLE[np.frombuffer(data, dtype=np.uint8)]
