"""tts/conv2d.py on small hand-built graphs: the rewrite keeps every output, moves the
convolutions to 2-D, and keeps a chain of them 4-D (the real voice: tests/test_tts_piper.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from numpy.typing import NDArray
from onnx import TensorProto, helper, numpy_helper

from tts.conv2d import rewrite_conv1d

RNG = np.random.default_rng(7)
C = 6


def weight(name: str, *shape: int) -> TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name)


def model(nodes: list[onnx.NodeProto], inits: list[TensorProto], outputs: list[str]) -> onnx.ModelProto:
    """A float graph of input ``x`` (1, C, T); its outputs' shapes are left to inference."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, "T"])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["a", "b", "c"]) for y in outputs],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def hifigan_like() -> onnx.ModelProto:
    """A HiFi-GAN-shaped chain: conv, activation, upsampling, a residual block, a scalar
    division, a mask multiply (a 3-D reader) and a second output read in 3-D."""
    nodes = [
        helper.make_node("Conv", ["x", "w_pre", "b_pre"], ["pre"], kernel_shape=[7], pads=[3, 3]),
        helper.make_node("LeakyRelu", ["pre"], ["act"], alpha=0.1),
        helper.make_node(
            "ConvTranspose",
            ["act", "w_up", "b_up"],
            ["up"],
            kernel_shape=[4],
            strides=[2],
            pads=[1, 1],
            output_padding=[1],
        ),
        helper.make_node("LeakyRelu", ["up"], ["act2"], alpha=0.1),
        helper.make_node(
            "Conv", ["act2", "w_res", "b_res"], ["res"], kernel_shape=[3], dilations=[3], pads=[3, 3]
        ),
        helper.make_node("Add", ["res", "up"], ["sum"]),
        helper.make_node("Constant", [], ["three"], value=numpy_helper.from_array(np.array(3.0, np.float32))),
        helper.make_node("Div", ["sum", "three"], ["scaled"]),
        helper.make_node("Conv", ["scaled", "w_post"], ["post"], kernel_shape=[7], pads=[3, 3]),
        helper.make_node("Tanh", ["post"], ["audio"]),
        # a 3-D reader of a 4-D tensor: the residual sum reduced over time
        helper.make_node("ReduceMean", ["sum"], ["level"], axes=[2], keepdims=1),
        # a 3-D tensor added to a convolution's output: must not broadcast against 4-D
        helper.make_node("Conv", ["x", "w_skip"], ["skip"], kernel_shape=[1]),
        helper.make_node("Identity", ["x"], ["x3"]),
        helper.make_node("Add", ["skip", "x3"], ["skipsum"]),
    ]
    inits = [
        weight("w_pre", C, C, 7),
        weight("b_pre", C),
        weight("w_up", C, C // 2, 4),
        weight("b_up", C // 2),
        weight("w_res", C // 2, C // 2, 3),
        weight("b_res", C // 2),
        weight("w_post", 1, C // 2, 7),
        weight("w_skip", C, C, 1),
    ]
    return model(nodes, inits, ["audio", "level", "skipsum"])


def run(m: onnx.ModelProto, x: NDArray[np.float32]) -> list[NDArray[np.float32]]:
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(y) for y in session.run(None, {"x": x})]


def rewritten(m: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    copy = onnx.ModelProto()
    copy.CopyFrom(m)
    return copy, rewrite_conv1d(copy)


@pytest.mark.parametrize("frames", [1, 5, 37])
def test_the_rewritten_graph_computes_the_same_outputs(frames: int) -> None:
    original = hifigan_like()
    new, count = rewritten(original)
    onnx.checker.check_model(new)
    assert count == 5
    x = RNG.standard_normal((1, C, frames)).astype(np.float32)
    before, after = run(original, x), run(new, x)
    assert [y.shape for y in after] == [y.shape for y in before]
    assert before[0].shape == (1, 1, 2 * frames + 1)  # (T - 1) * 2 + 4 - 2 + output_padding 1
    for a, b in zip(before, after, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def test_convolutions_are_2d_and_the_chain_stays_4d() -> None:
    new, _ = rewritten(hifigan_like())
    inits = {i.name: i for i in new.graph.initializer}
    convs = [n for n in new.graph.node if n.op_type in ("Conv", "ConvTranspose")]
    assert all(len(inits[n.input[1]].dims) == 4 for n in convs)
    attrs = {n.input[1]: {a.name: list(a.ints) for a in n.attribute} for n in convs}
    assert attrs["w_res"] == {"kernel_shape": [1, 3], "dilations": [1, 3], "pads": [0, 3, 0, 3]}
    assert attrs["w_up"]["strides"] == [1, 2] and attrs["w_up"]["output_padding"] == [0, 1]
    ops = Counter(n.op_type for n in new.graph.node)
    # x is unsqueezed once for its two convolutions; squeezed back: audio (an output), sum
    # (ReduceMean reads it), skip (added to the 3-D x); the decoder chain between stays 4-D
    assert ops["Unsqueeze"] == 1
    assert ops["Squeeze"] == 3
    assert [y.name for y in new.graph.output] == ["audio", "level", "skipsum"]


def test_a_weight_shared_with_another_reader_is_copied_not_reshaped() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1]),
        helper.make_node("MatMul", ["wflat", "x"], ["z"]),
        helper.make_node("Reshape", ["w", "shape"], ["wflat"]),
    ]
    inits = [weight("w", C, C, 1), numpy_helper.from_array(np.array([C, C], np.int64), "shape")]
    # topological order: the reshape first
    original = model([nodes[2], nodes[0], nodes[1]], inits, ["y", "z"])
    new, count = rewritten(original)
    assert count == 1
    x = RNG.standard_normal((1, C, 4)).astype(np.float32)
    for a, b in zip(run(original, x), run(new, x), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    dims = {i.name: list(i.dims) for i in new.graph.initializer}
    assert dims["w"] == [C, C, 1]


def test_graphs_without_1d_convolutions_or_with_subgraphs_are_left_alone() -> None:
    plain = model([helper.make_node("Relu", ["x"], ["y"])], [], ["y"])
    assert rewritten(plain)[1] == 0
    body = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["out"])],
        "body",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
    )
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1]),
        helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(np.array(True))),
        helper.make_node("If", ["cond"], ["z"], then_branch=body, else_branch=body),
    ]
    with_if = model(nodes, [weight("w", C, C, 1)], ["y", "z"])
    new, count = rewritten(with_if)
    assert count == 0
    assert new == with_if
