"""The peer's audio as the session wants it: float32 at the pipeline rate, stamped on arrival."""

from __future__ import annotations

from collections.abc import Callable

import soxr

from voice_pipeline.audio import Float32, Int16, input_resampler, to_float32
from voice_pipeline.clock import now_ns
from voice_pipeline.conversation.session import Session


class PeerAudio:
    """The peer's audio as the session wants it: float32 at the pipeline rate."""

    def __init__(self, pipeline_rate_hz: int, *, clock: Callable[[], int] = now_ns) -> None:
        self.rate_hz = pipeline_rate_hz
        self._clock = clock
        self._resamplers: dict[int, soxr.ResampleStream] = {}

    def convert(self, pcm: Int16, rate_hz: int) -> Float32:
        """``pcm`` at ``rate_hz``, resampled by that rate's own stream (it keeps its state
        across chunks; none at the pipeline rate)."""
        samples = to_float32(pcm)
        if rate_hz == self.rate_hz:
            return samples
        stream = self._resamplers.get(rate_hz)
        if stream is None:
            stream = self._resamplers[rate_hz] = input_resampler(rate_hz, self.rate_hz)
        resampled: Float32 = stream.resample_chunk(samples)
        return resampled

    async def push(self, session: Session, pcm: Int16, rate_hz: int) -> None:
        """Convert ``pcm`` and push it into ``session``, stamped with the moment it arrived."""
        samples = self.convert(pcm, rate_hz)
        if len(samples):
            await session.push_audio(samples, self._clock())
