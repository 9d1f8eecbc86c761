"""A chunk's head decoded first (tts/head_first.py): the graph cut at the decoder, the window
arithmetic on a hand-built convolutional decoder, and the real voice (CI, real models)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import soxr
from onnx import TensorProto, helper

from asr.base import ASREngine
from tts.base import TTS, HeadFirst, synthesize_head
from tts.head_first import CONTEXT_FRAMES, HEAD_FRAMES, HeadDecoder, head_gain, split_voice, worth_cutting
from tts.piper import PiperTTS
from voice_pipeline.errors import ClosedError

CHANNELS = 4
UP = 4  # samples per latent frame in the toy decoder


def toy_voice(*, decoder_prefix: str = "/dec/") -> onnx.ModelProto:
    """input (1, C, 1, T) -> front (x * 2) -> a decoder: conv (reach 2 frames), an upsampling
    transposed conv (x4), conv (reach 1 sample) -> output (1, 1, 1, 4T)."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> TensorProto:
        return helper.make_tensor(
            name, TensorProto.FLOAT, shape, rng.normal(size=shape).astype(np.float32).ravel()
        )

    d = decoder_prefix
    nodes = [
        helper.make_node("Mul", ["input", "two"], ["/Mul_output_0"], name="/Mul"),
        helper.make_node(
            "Conv", ["/Mul_output_0", "w1"], ["h1"], name=f"{d}conv_pre/Conv", pads=[0, 2, 0, 2]
        ),
        helper.make_node("LeakyRelu", ["h1"], ["h2"], name=f"{d}LeakyRelu", alpha=0.1),
        helper.make_node("ConvTranspose", ["h2", "w2"], ["h3"], name=f"{d}up/ConvTranspose", strides=[1, UP]),
        helper.make_node("Conv", ["h3", "w3"], ["output"], name=f"{d}conv_post/Conv", pads=[0, 1, 0, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "toy",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, CHANNELS, 1, None])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, 1, None])],
        [
            helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
            weight("w1", 8, CHANNELS, 1, 5),
            weight("w2", 8, 4, 1, UP),
            weight("w3", 1, 4, 1, 3),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def session(graph: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(graph, providers=["CPUExecutionProvider"])


def test_only_a_chunk_longer_than_two_heads_and_a_context_is_cut() -> None:
    assert not worth_cutting(2 * HEAD_FRAMES + CONTEXT_FRAMES)
    assert worth_cutting(2 * HEAD_FRAMES + CONTEXT_FRAMES + 1)


def test_the_gain_never_exceeds_the_reference_peak_s() -> None:
    assert head_gain(0.25, 0.5) == pytest.approx(2.0)  # a quiet head: the reference decides
    assert head_gain(0.8, 0.5) == pytest.approx(1.25)  # a loud head: its own peak
    assert head_gain(0.0, 0.0) == 1.0  # silence stays silence


def test_the_graph_is_cut_at_the_decoder_s_one_input() -> None:
    model = toy_voice()
    parts = split_voice(model)
    assert parts is not None
    front, decoder, latent = parts
    assert latent == "/Mul_output_0"
    assert [n.op_type for n in onnx.load_from_string(front).graph.node] == ["Mul"]
    assert [n.op_type for n in onnx.load_from_string(decoder).graph.node] == [
        "Conv",
        "LeakyRelu",
        "ConvTranspose",
        "Conv",
    ]
    assert len(model.graph.value_info) == 0  # the caller's graph is left as it was


def test_a_graph_without_a_decoder_is_not_cut() -> None:
    assert split_voice(toy_voice(decoder_prefix="/other/")) is None


def test_head_and_rest_are_the_whole_decode() -> None:
    parts = split_voice(toy_voice())
    assert parts is not None
    dec = HeadDecoder(*parts, make_session=session)
    frames = 2 * HEAD_FRAMES + CONTEXT_FRAMES + 7
    x = np.random.default_rng(1).normal(size=(1, CHANNELS, 1, frames)).astype(np.float32)
    z = dec.latent({"input": x})
    np.testing.assert_allclose(z, 2 * x)
    whole = dec.decode(z)
    head, rest = dec.head(z), dec.rest(z)
    assert len(head) == HEAD_FRAMES * UP and len(head) + len(rest) == len(whole) == frames * UP
    np.testing.assert_allclose(np.concatenate([head, rest]), whole, atol=1e-5)


class _Whole:
    sample_rate_hz = 8000
    voice = "whole"

    def synthesize(self, text: str) -> np.ndarray:
        return np.ones(len(text), dtype=np.int16)

    def close(self) -> None: ...


def test_an_engine_without_a_head_gives_the_whole_chunk() -> None:
    engine: TTS = _Whole()
    parts = synthesize_head(engine, "four")
    assert parts.rest is None and len(parts.head) == 4


# ---------------------------------------------------------------- the real voice


@pytest.mark.real_models
def test_the_real_voice_s_head_and_rest_are_its_own_audio(piper: TTS) -> None:
    """Noise off: the head and the rest decoded apart are the decoder's whole output, which
    is the voice file's own audio (float rounding)."""
    from piper.config import SynthesisConfig

    assert isinstance(piper, PiperTTS)
    voice, dec = piper._voice, piper._head
    assert voice is not None and dec is not None  # tts.head_first is the default
    quiet = piper._scales.copy()
    quiet[0] = quiet[2] = 0.0
    text = "The capital of France is Paris."
    (phonemes,) = voice.phonemize(text)
    z = dec.latent(piper._feeds(voice.phonemes_to_ids(phonemes), quiet))
    assert worth_cutting(z.shape[-1])
    whole = dec.decode(z)
    parts = np.concatenate([dec.head(z), dec.rest(z)])
    assert parts.shape == whole.shape
    assert float(np.max(np.abs(parts - whole))) < 1e-4  # measured ~1e-6
    still = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, normalize_audio=False)
    (chunk,) = voice.synthesize(text, still)
    assert float(np.max(np.abs(chunk.audio_float_array - whole))) < 1e-3


@pytest.mark.real_models
def test_a_chunk_said_head_first_is_heard_as_its_words(piper: TTS, whisper: ASREngine) -> None:
    assert isinstance(piper, PiperTTS)
    parts = piper.synthesize_head("The capital of France is Paris.")
    assert parts.rest is not None
    rest = parts.rest()
    rate = piper.sample_rate_hz
    # the head is the first ~0.28 s (its leading silence trimmed), the rest about as announced
    assert 0.1 * rate < len(parts.head) <= HEAD_FRAMES * 256
    assert abs(len(rest) - parts.rest_samples) < 0.2 * rate
    audio = np.concatenate([parts.head, rest])
    pcm = soxr.resample(audio.astype(np.float32) / 32768.0, rate, 16000, quality="HQ")
    words = whisper.transcribe(np.ascontiguousarray(pcm, dtype=np.float32)).text.lower()
    assert "capital" in words and "paris" in words, words
    # scaled as one chunk, not much quieter than Piper's own (a peak of 1): within 6 dB
    assert np.max(np.abs(audio)) > 32767 / 2


@pytest.mark.real_models
def test_a_short_chunk_comes_whole(piper: TTS) -> None:
    assert isinstance(piper, PiperTTS)
    parts = piper.synthesize_head("Yes.")
    assert parts.rest is None and parts.head.size > 0
    empty = piper.synthesize_head("...")
    assert empty == HeadFirst(empty.head) and empty.head.size == 0


@pytest.mark.real_models
def test_a_closed_engine_refuses_a_head(model_paths: object, config: object) -> None:
    from voice_pipeline.config import Config
    from voice_pipeline.models import ModelPaths

    assert isinstance(model_paths, ModelPaths) and isinstance(config, Config)
    engine = PiperTTS(config.tts, Path(model_paths.tts))
    engine.close()
    with pytest.raises(ClosedError):
        engine.synthesize_head("Hello.")
