"""Slice (constant starts/ends/axes/steps) and Pad (constant, reflect, edge, wrap): index maps."""
from __future__ import annotations

import numpy as np

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._index import index_launch
from nnhal.device.webgpu.kernels._wgsl import lit, strides
from nnhal.device.webgpu.kernels.base import Emitter, elem_of
from nnhal.graph.node import Node
from nnhal.operator.op_pad import pad_widths, static_pads

OPS = ("Slice", "Pad")


def why_not(c: Candidate) -> str | None:
    x = c.inputs[0]
    if x is None or not x.static or elem_of(x.dtype) is None:
        return f"{c.node.op_type} needs a float32/int input of known shape"
    if c.outputs[0] is None or not c.outputs[0].static:
        return f"{c.node.op_type} output shape is not known"
    for i, info in enumerate(c.inputs[1:], 1):
        if c.node.inputs[i] and (info is None or info.value is None):
            return f"{c.node.op_type} input {i} is not a constant"
    if c.node.op_type == "Pad" and x.dtype.name != "float32" and c.node.attrs.get("mode", "constant") == "constant":
        return "Pad of an integer tensor is not implemented"
    return None


def _slice_params(node: Node, em: Emitter, shape: list[int]) -> tuple[list[int], list[int]]:
    """Per-axis start and step (the output shape is known from inference)."""
    rank = len(shape)
    if node.version < 10:
        starts, ends = list(node.attrs["starts"]), list(node.attrs["ends"])
        axes = list(node.attrs.get("axes") or range(len(starts)))
        steps = [1] * len(starts)
    else:

        def value(i: int, d: list[int]) -> list[int]:
            if len(node.inputs) > i and node.inputs[i]:
                return [int(v) for v in np.ravel(em.value(node.inputs[i]))]
            return d
        starts, ends = value(1, None), value(2, None)
        axes = value(3, list(range(len(starts))))
        steps = value(4, [1] * len(starts))
    first, step = [0] * rank, [1] * rank
    for s, e, a, k in zip(starts, ends, axes, steps):
        a %= rank
        d = shape[a]
        # NOTE: python's slice does the clamping ONNX specifies for both signs of step
        first[a] = range(d)[slice(s, e, k)].start if len(range(d)[slice(s, e, k)]) else 0
        step[a] = k
    return first, step


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    shape = [int(d) for d in em.shape(node.inputs[0])]
    st = strides(shape)
    if node.op_type == "Slice":
        first, step = _slice_params(node, em, shape)
        terms = [f"u32({first[i]} + i32(c{i}) * {step[i]}) * {st[i]}u" for i in range(len(shape))]
        body = [f"let val = in0[{' + '.join(terms) or '0u'}];"]
        em.launch(index_launch(em, [node.inputs[0]], node.outputs[0], body, "Slice"))
        return
    if node.version < 11:
        pads = static_pads(node)
        fill = float(node.attrs.get("value", 0.0))
        axes = None
    else:
        pads = [int(v) for v in np.ravel(em.value(node.inputs[1]))]
        fill = float(np.ravel(em.value(node.inputs[2]))[0]) if len(node.inputs) > 2 and node.inputs[2] else 0.0
        axes = [int(v) for v in np.ravel(em.value(node.inputs[3]))] if len(node.inputs) > 3 and node.inputs[3] else None
    widths = pad_widths(node, len(shape), pads, axes)
    mode = node.attrs.get("mode", "constant")
    body, inside = [], []
    for i, (d, (b, _)) in enumerate(zip(shape, widths)):
        body.append(f"var i{i} = i32(c{i}) - {b};")
        if mode == "reflect":
            body.append(f"if (i{i} < 0) {{ i{i} = -i{i}; }}")
            body.append(f"if (i{i} >= {d}) {{ i{i} = {2 * d - 2} - i{i}; }}")
        elif mode == "edge":
            body.append(f"i{i} = clamp(i{i}, 0, {d - 1});")
        elif mode == "wrap":
            body.append(f"i{i} = ((i{i} % {d}) + {d}) % {d};")
        inside.append(f"i{i} >= 0 && i{i} < {d}")
    index = " + ".join(f"u32(i{i}) * {st[i]}u" for i in range(len(shape))) or "0u"
    body.append(f"var val = {lit(fill)};")
    body.append(f"if ({' && '.join(inside) or 'true'}) {{ val = in0[{index}]; }}")
    em.launch(index_launch(em, [node.inputs[0]], node.outputs[0], body, f"Pad({mode})"))
