"""A chunk's first fraction of a second, synthesized before the rest of it.

Piper's voice is one graph: the text encoder, durations and flow turn the phonemes into
latent frames (``z``, 192 channels, one frame per 256 samples), and a HiFi-GAN decoder turns
those into audio. The decoder is two thirds of the time (``The capital of France``, 113
frames, 1 thread, AVX-512 BF16 Intel Xeon: front 26 ms + decoder 55 ms) and it is
convolutional: each output sample depends on a few frames around it. So the first
:data:`HEAD_FRAMES` frames can be decoded alone, with :data:`CONTEXT_FRAMES` frames of the
right-hand context, and sent while the rest is decoded (with as much context on its left):
the first audio is ready after the front and a 40-frame window (~45 ms there) instead of
the whole chunk (~80), and the rest (a few tens of ms) is ready long before the head's
0.28 s have played. The samples are the decoder's own to float rounding (max difference
~1e-6: ``tests/test_tts_head_first.py``).

One thing cannot be known from the head: Piper scales each sentence to a peak of 1
(``normalize_audio``), and the peak may come later. The head and the rest are scaled alike
by ``1 / max(head peak, reference)`` (:func:`head_gain`), where the reference is the voice's
own peak on a few calibration sentences (measured once at load, noise off): never louder
than a whole-chunk normalization of a chunk as loud as those, and clipped like Piper's
output where a later peak is louder still.

:class:`HeadDecoder` holds the two halves of the graph (:func:`split_voice`) as onnxruntime
sessions; :mod:`tts.piper` uses it for :meth:`tts.piper.PiperTTS.synthesize_head`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "CONTEXT_FRAMES",
    "HEAD_FRAMES",
    "HeadDecoder",
    "head_gain",
    "split_voice",
    "worth_cutting",
]

#: latent frames decoded first (~0.28 s at Piper's 22.05 kHz and 256 samples a frame)
HEAD_FRAMES = 24
#: frames of context decoded on the far side of a window's cut and thrown away: HiFi-GAN's
#: reach is well inside it (the head differs from the whole decode by ~1e-6)
CONTEXT_FRAMES = 16
#: the decoder's prefix in Piper's (VITS) graph
_DECODER_PREFIX = "/dec/"


def worth_cutting(frames: int, head: int = HEAD_FRAMES, context: int = CONTEXT_FRAMES) -> bool:
    """A chunk of ``frames`` latent frames gains from a head decoded first: the rest is
    longer than the head's own window."""
    return frames > 2 * head + context


def head_gain(head_peak: float, reference_peak: float) -> float:
    """The scale of a chunk synthesized head first (see the module doc); 1.0 for silence."""
    peak = max(head_peak, reference_peak)
    return 1.0 / peak if peak > 1e-8 else 1.0


def decoder_input(model: Any) -> str | None:
    """The one tensor the decoder reads from the rest of the graph, or None if the graph
    is not shaped like Piper's (no ``/dec/`` nodes, or several inputs from outside)."""
    nodes = [n for n in model.graph.node if n.name.startswith(_DECODER_PREFIX)]
    inside = {o for n in nodes for o in n.output}
    weights = {i.name for i in model.graph.initializer}
    outside = {i for n in nodes for i in n.input if i and i not in inside and i not in weights}
    return next(iter(outside)) if len(outside) == 1 else None


def split_voice(model: Any) -> tuple[bytes, bytes, str] | None:
    """Piper's graph (an ``onnx.ModelProto``) cut at the decoder's input: (front, decoder,
    the tensor's name), serialized; None if it cannot be cut (:func:`decoder_input`)."""
    import onnx
    from onnx.utils import Extractor

    name = decoder_input(model)
    if name is None or len(model.graph.output) != 1 or model.graph.node[0].name.startswith(_DECODER_PREFIX):
        return None
    model = onnx.ModelProto.FromString(model.SerializeToString())  # the caller's stays as it was
    model.graph.value_info.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    extractor = Extractor(model)
    inputs = [i.name for i in model.graph.input]
    output = model.graph.output[0].name
    front = extractor.extract_model(inputs, [name])
    decoder = extractor.extract_model([name], [output])
    return front.SerializeToString(), decoder.SerializeToString(), name


class HeadDecoder:
    """The voice's two halves as onnxruntime sessions (built like the whole one)."""

    def __init__(
        self, front: bytes, decoder: bytes, latent: str, make_session: Callable[[bytes], Any]
    ) -> None:
        self._front = make_session(front)
        self._decoder = make_session(decoder)
        self._latent = latent

    def latent(self, feeds: dict[str, NDArray[Any]]) -> NDArray[np.float32]:
        """The decoder's input for one sentence (the front's random draws included)."""
        z: NDArray[np.float32] = self._front.run(None, feeds)[0]
        return z

    def decode(self, z: NDArray[np.float32]) -> NDArray[np.float32]:
        """Raw audio (float, unscaled) for latent frames ``z`` (frames on the last axis)."""
        out: NDArray[np.float32] = self._decoder.run(None, {self._latent: z})[0]
        return out.reshape(-1)

    def head(self, z: NDArray[np.float32]) -> NDArray[np.float32]:
        """The first :data:`HEAD_FRAMES` frames' audio (decoded with the context after them)."""
        audio = self.decode(np.ascontiguousarray(z[..., : HEAD_FRAMES + CONTEXT_FRAMES]))
        per_frame = len(audio) // min(z.shape[-1], HEAD_FRAMES + CONTEXT_FRAMES)
        return audio[: HEAD_FRAMES * per_frame]

    def rest(self, z: NDArray[np.float32]) -> NDArray[np.float32]:
        """The audio after the head's (decoded with the context before it)."""
        first = HEAD_FRAMES - CONTEXT_FRAMES
        audio = self.decode(np.ascontiguousarray(z[..., first:]))
        per_frame = len(audio) // (z.shape[-1] - first)
        return audio[CONTEXT_FRAMES * per_frame :]
