"""The Realtime protocol's audio formats and their conversions (pure; numpy and soxr only).

``audio/pcm`` is PCM16 little-endian mono at 24 kHz; ``audio/pcmu`` and
``audio/pcma`` are G.711 µ-law and A-law at 8 kHz. Audio travels base64-coded
in ``input_audio_buffer.append`` and ``response.output_audio.delta``.

:class:`InputDecoder` turns a client's appended audio into the pipeline's
float32 samples (16 kHz by default) with one streaming resampler per decoder,
as the ``/ws`` and telephony edges do, so chunk boundaries never click; a PCM16
chunk with an odd number of bytes keeps its last byte for the next one.
:class:`OutputEncoder` codes reply audio for the wire: the session hands over
whole clauses (resampled to the wire rate per clause, as it does for every
transport), and audio at another rate is resampled the same way, clause by
clause (HQ, :func:`voice_pipeline.audio.resample_int16`).
"""

from __future__ import annotations

import enum

import numpy as np
import soxr

from voice_pipeline.audio import Float32, Int16, input_resampler, resample_int16, to_float32
from voice_pipeline.realtime.wire import Json
from voice_pipeline.telephony import alaw, mulaw

PCM_RATE_HZ = 24000
G711_RATE_HZ = 8000


class AudioFormat(enum.StrEnum):
    PCM = "audio/pcm"
    PCMU = "audio/pcmu"
    PCMA = "audio/pcma"

    @property
    def rate_hz(self) -> int:
        return PCM_RATE_HZ if self is AudioFormat.PCM else G711_RATE_HZ

    @property
    def bytes_per_sample(self) -> int:
        return 2 if self is AudioFormat.PCM else 1

    def duration_ms(self, nbytes: int) -> float:
        """Milliseconds of audio in ``nbytes`` bytes of this format."""
        return nbytes / self.bytes_per_sample * 1000 / self.rate_hz


def format_json(fmt: AudioFormat) -> Json:
    """The format object of the session (``audio.input.format`` / ``audio.output.format``)."""
    if fmt is AudioFormat.PCM:
        return {"type": str(fmt), "rate": PCM_RATE_HZ}
    return {"type": str(fmt)}


def decode(fmt: AudioFormat, data: bytes) -> Int16:
    """Wire bytes (whole samples) -> 16-bit samples at ``fmt.rate_hz``."""
    match fmt:
        case AudioFormat.PCM:
            return np.frombuffer(data, dtype="<i2").astype(np.int16)
        case AudioFormat.PCMU:
            return mulaw.decode(data)
        case AudioFormat.PCMA:
            return alaw.decode(data)


def encode(fmt: AudioFormat, pcm: Int16) -> bytes:
    """16-bit samples at ``fmt.rate_hz`` -> wire bytes."""
    match fmt:
        case AudioFormat.PCM:
            return np.asarray(pcm, dtype="<i2").tobytes()
        case AudioFormat.PCMU:
            return mulaw.encode(pcm)
        case AudioFormat.PCMA:
            return alaw.encode(pcm)


class InputDecoder:
    """One input format's appended audio -> float32 at ``pipeline_rate_hz``, chunk by chunk.

    ``samples_in`` counts the wire-rate samples decoded so far (``ms_in`` in ms):
    the input audio timeline that ``audio_start_ms``/``audio_end_ms`` are on.
    """

    def __init__(self, fmt: AudioFormat, pipeline_rate_hz: int) -> None:
        self.format = fmt
        self.pipeline_rate_hz = pipeline_rate_hz
        self.samples_in = 0
        self._odd = b""  # the first byte of a PCM16 sample whose second byte is still to come
        self._resampler: soxr.ResampleStream | None = (
            None if fmt.rate_hz == pipeline_rate_hz else input_resampler(fmt.rate_hz, pipeline_rate_hz)
        )

    @property
    def ms_in(self) -> float:
        return self.samples_in * 1000 / self.format.rate_hz

    def decode(self, data: bytes, *, last: bool = False) -> Float32:
        """``last``: the end of the stream (what the resampler holds back comes out too)."""
        if self._odd:
            data = self._odd + data
            self._odd = b""
        if self.format is AudioFormat.PCM and len(data) % 2:
            data, self._odd = data[:-1], data[-1:]
        pcm = decode(self.format, data)
        self.samples_in += len(pcm)
        samples = to_float32(pcm)
        if self._resampler is not None and (len(samples) or last):
            samples = np.asarray(self._resampler.resample_chunk(samples, last=last), dtype=np.float32)
        return samples


class OutputEncoder:
    """Reply audio (16-bit, ``source_rate_hz``, whole clauses) -> bytes of the output format.

    ``samples_out`` counts the wire-rate samples produced (the item's audio length,
    the unit of ``conversation.item.truncate``'s ``audio_end_ms`` once in ms).
    """

    def __init__(self, fmt: AudioFormat, source_rate_hz: int) -> None:
        self.format = fmt
        self.source_rate_hz = source_rate_hz
        self.samples_out = 0

    def encode(self, pcm: Int16) -> bytes:
        wire = resample_int16(np.asarray(pcm, dtype=np.int16), self.source_rate_hz, self.format.rate_hz)
        self.samples_out += len(wire)
        return encode(self.format, wire)
