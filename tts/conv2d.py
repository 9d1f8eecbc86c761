"""A voice's 1-D convolutions rewritten as 2-D ones, so onnxruntime runs its fast kernels.

Piper voices (VITS) spend most of a synthesis in HiFi-GAN's 1-D ``Conv``s. onnxruntime's
CPU provider runs 2-D convolutions in a blocked channel layout (its NCHWc transformer,
AVX2/AVX-512 kernels) but leaves 1-D ones on a slower generic path. A 1-D convolution over
``(N, C, T)`` is exactly a 2-D one over ``(N, C, 1, T)`` with a ``1 x k`` kernel, so
:func:`rewrite_conv1d` turns every 1-D ``Conv``/``ConvTranspose`` with a constant weight into
that. The result is the same arithmetic (float rounding aside) and the same audio.

A tensor a rewritten convolution makes is kept 4-D through the element-wise operations that
follow it (activations, and ``Add``/``Sub``/``Mul``/``Div`` whose other inputs are 4-D too or
scalars), so a chain such as HiFi-GAN's decoder stays in the 2-D layout from end to end. It is
squeezed back to 3-D only where something else reads it, under its old name; a 3-D input of a
rewritten convolution is unsqueezed once. Graph outputs keep their names and shapes.

Measured on a 2-core Intel Xeon (AVX-512 BF16, 1 onnxruntime thread), en_US-joe-medium:
"The capital of France" 137 -> 110 ms, a 10-word clause 348 -> 251 ms (README, issue #18).

Pure: works on an :class:`onnx.ModelProto` in memory; the caller loads and serializes it.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

__all__ = ["ELEMENTWISE_BINARY", "ELEMENTWISE_UNARY", "rewrite_conv1d"]

#: element-wise operations a 4-D tensor passes through unchanged in layout
ELEMENTWISE_UNARY = frozenset({"LeakyRelu", "Relu", "Tanh", "Sigmoid", "Elu", "Selu", "Neg", "Abs"})
#: ... and binary ones, when every other input is 4-D too or a scalar
ELEMENTWISE_BINARY = frozenset({"Add", "Sub", "Mul", "Div"})
_CONVS = frozenset({"Conv", "ConvTranspose"})
_SUFFIX = "__4d"


def rewrite_conv1d(model: onnx.ModelProto) -> int:
    """Rewrite ``model``'s 1-D convolutions as 2-D ones, in place; the number rewritten.

    A model whose nodes hold subgraphs (``If``, ``Loop``, ``Scan``) is left untouched (0):
    their bodies may read any outer tensor by name.
    """
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    if any(
        attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for node in graph.node
        for attr in node.attribute
    ):
        return 0
    inits = {init.name: init for init in graph.initializer}
    scalars = {name for name, init in inits.items() if int(np.prod(init.dims)) == 1}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute:
            value = node.attribute[0]
            if value.name in ("value_float", "value_int") or (
                value.name == "value" and int(np.prod(value.t.dims)) == 1
            ):
                scalars.add(node.output[0])

    def conv1d_weight(node: onnx.NodeProto) -> str | None:
        if node.op_type not in _CONVS or len(node.input) < 2:
            return None
        weight = inits.get(node.input[1])
        return node.input[1] if weight is not None and len(weight.dims) == 3 else None

    convs = [node for node in graph.node if conv1d_weight(node)]
    if not convs:
        return 0

    def is_conv1d(node: onnx.NodeProto) -> bool:
        return node.op_type in _CONVS and len(node.input) > 1 and node.input[1] in conv_uses

    uses = Counter(name for node in graph.node for name in node.input)
    conv_uses = Counter(node.input[1] for node in convs)
    weights_4d: dict[str, str] = {}
    for name in conv_uses:
        arr = numpy_helper.to_array(inits[name])[:, :, None, :]
        if uses[name] == conv_uses[name]:  # only these convolutions read it: reshape in place
            inits[name].CopyFrom(numpy_helper.from_array(arr, name))
            weights_4d[name] = name
        else:
            graph.initializer.append(numpy_helper.from_array(arr, name + _SUFFIX))
            weights_4d[name] = name + _SUFFIX
    axis = _unique(graph, "conv2d_axis")
    graph.initializer.append(numpy_helper.from_array(np.array([2], dtype=np.int64), axis))

    four: dict[str, str] = {}  # 3-D name -> its 4-D twin
    only_4d: set[str] = set()  # made 4-D, not (yet) materialized as 3-D
    out: list[onnx.NodeProto] = []

    def as3(name: str) -> str:
        if name in only_4d:
            out.append(helper.make_node("Squeeze", [four[name], axis], [name], name=name + "/squeeze"))
            only_4d.discard(name)
        return name

    def as4(name: str) -> str:
        if name not in four:
            four[name] = name + _SUFFIX
            out.append(helper.make_node("Unsqueeze", [name, axis], [four[name]], name=name + "/unsqueeze"))
        return four[name]

    def goes_4d(node: onnx.NodeProto) -> bool:
        if is_conv1d(node):
            return True
        if node.op_type in ELEMENTWISE_UNARY:
            return node.input[0] in four
        if node.op_type in ELEMENTWISE_BINARY:
            return any(x in four for x in node.input) and all(x in four or x in scalars for x in node.input)
        return False

    for node in graph.node:
        new = onnx.NodeProto()
        new.CopyFrom(node)  # copies: the graph's own nodes are cleared below
        if not goes_4d(node):
            new.input[:] = [as3(x) if x else x for x in node.input]
            out.append(new)
            continue
        if is_conv1d(node):
            new.input[0] = as4(node.input[0])
            new.input[1] = weights_4d[node.input[1]]
            del new.attribute[:]
            new.attribute.extend(_conv2d_attribute(attr) for attr in node.attribute)
        else:
            new.input[:] = [four.get(x, x) for x in node.input]
        for i, y in enumerate(node.output):
            four[y] = y + _SUFFIX
            only_4d.add(y)
            new.output[i] = four[y]
        out.append(new)
    for output in graph.output:
        as3(output.name)
    del graph.node[:]
    graph.node.extend(out)
    kept = [info for info in graph.value_info if info.name not in only_4d]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    return len(convs)


def _conv2d_attribute(attr: onnx.AttributeProto) -> onnx.AttributeProto:
    """A 1-D convolution's attribute for its ``1 x k`` 2-D twin."""
    from onnx import helper

    if attr.name in ("kernel_shape", "dilations", "strides", "output_shape"):
        return helper.make_attribute(attr.name, [1, *attr.ints])
    if attr.name == "output_padding":
        return helper.make_attribute(attr.name, [0, *attr.ints])
    if attr.name == "pads":  # [begin, end] -> [h_begin, w_begin, h_end, w_end]
        begin, end = attr.ints
        return helper.make_attribute("pads", [0, begin, 0, end])
    return attr


def _unique(graph: onnx.GraphProto, base: str) -> str:
    names = {init.name for init in graph.initializer} | {y for n in graph.node for y in n.output}
    name, i = base, 0
    while name in names:
        i += 1
        name = f"{base}_{i}"
    return name
