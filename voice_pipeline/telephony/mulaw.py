"""G.711 µ-law, bit-exact to the standard, in numpy (no ``audioop``: gone in Python 3.13).

The algorithm is the reference one of ITU-T G.711 as implemented in Sun's
``g711.c`` (and so in CPython's ``audioop.lin2ulaw``/``ulaw2lin``): the 16-bit
sample is reduced to 14 bits, clipped at 8159, biased by 33, and coded as a
sign bit, a 3-bit segment and a 4-bit mantissa, all bits inverted.
Decoding uses a 256-entry table built from the standard's expansion formula.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

_BIAS = 0x84  # 132, the 16-bit bias (33 at 14 bits)
_CLIP = 8159  # largest 14-bit magnitude that can be coded
_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32)


def _build_decode_table() -> NDArray[np.int16]:
    u = (~np.arange(256, dtype=np.int32)) & 0xFF
    t = (((u & 0x0F) << 3) + _BIAS) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _BIAS - t, t - _BIAS).astype(np.int16)


#: µ-law byte -> 16-bit linear sample
DECODE_TABLE: NDArray[np.int16] = _build_decode_table()
DECODE_TABLE.setflags(write=False)


def encode(pcm: NDArray[np.int16]) -> bytes:
    """16-bit linear samples -> µ-law bytes (one per sample)."""
    val = np.asarray(pcm, dtype=np.int16).astype(np.int32) >> 2  # 14-bit, floor like C's >>
    negative = val < 0
    mag = np.minimum(np.where(negative, -val, val), _CLIP) + (_BIAS >> 2)
    # segment = index of the first segment end >= mag; 8 = beyond the last (coded as 0x7f)
    seg = np.searchsorted(_SEG_END, mag).astype(np.int32)
    code = np.where(seg >= 8, 0x7F, (seg << 4) | ((mag >> (seg + 1)) & 0x0F))
    mask = np.where(negative, 0x7F, 0xFF)
    return bytes((code ^ mask).astype(np.uint8).tobytes())


def decode(data: bytes) -> NDArray[np.int16]:
    """µ-law bytes -> 16-bit linear samples."""
    return DECODE_TABLE[np.frombuffer(data, dtype=np.uint8)]
