"""Audio helpers: file I/O, sample format conversion, resampling (soxr, HQ).

``np.interp`` is never used for resampling: it aliases audibly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
from numpy.typing import NDArray

from voice_pipeline.errors import AudioInputError

Float32 = NDArray[np.float32]
Int16 = NDArray[np.int16]


def read_audio(path: Path) -> tuple[Float32, int]:
    """Mono float32 samples and the file's rate. Any channel count is mixed down."""
    if not path.exists():
        raise AudioInputError(f"{path}: no such file")
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        raise AudioInputError(f"{path}: not a readable audio file ({exc})") from exc
    if data.size == 0 or len(data) == 0:
        raise AudioInputError(f"{path}: the file holds no audio")
    mono = data.mean(axis=1, dtype=np.float32)
    if not np.all(np.isfinite(mono)):
        raise AudioInputError(f"{path}: the audio contains NaN or infinite samples")
    return np.ascontiguousarray(mono), int(rate)


def write_audio(path: Path, samples: Int16 | Float32, rate_hz: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), samples, rate_hz, subtype="PCM_16")


def resample(samples: Float32, from_hz: int, to_hz: int) -> Float32:
    if from_hz == to_hz:
        return samples
    out = soxr.resample(samples, from_hz, to_hz, quality="HQ")
    return np.ascontiguousarray(out, dtype=np.float32)


def resample_int16(samples: Int16, from_hz: int, to_hz: int) -> Int16:
    if from_hz == to_hz:
        return samples
    return to_int16(resample(to_float32(samples), from_hz, to_hz))


def to_float32(pcm: Int16) -> Float32:
    return (pcm.astype(np.float32) / 32768.0).astype(np.float32)


def to_int16(samples: Float32) -> Int16:
    return (np.clip(samples, -1.0, 32767 / 32768) * 32768.0).astype(np.int16)


def rms_dbfs(samples: Float32) -> float:
    if samples.size == 0:
        return -120.0
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
    return float(20.0 * np.log10(max(rms, 1e-6)))
