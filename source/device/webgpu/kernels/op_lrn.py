"""LRN across channels: x / (bias + alpha / size * sum of squares in the channel window) ** beta."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._index import index_launch
from nnhal.device.webgpu.kernels._wgsl import lit
from nnhal.device.webgpu.kernels.base import Emitter
from nnhal.graph.node import Node

OPS = ("LRN",)


def why_not(c: Candidate) -> str | None:
    x = c.inputs[0]
    if x is None or not x.static or x.dtype is None or x.dtype.name != "float32" or x.rank < 3:
        return "LRN needs a float32 input of known shape and rank >= 3"
    return None


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    shape = [int(d) for d in em.shape(node.inputs[0])]
    channels = shape[1]
    plane = 1
    for d in shape[2:]:
        plane *= d
    size = int(node.attrs["size"])
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    body = [f"let c = i32((idx / {plane}u) % {channels}u);",
            f"let first = idx - u32(c) * {plane}u;",
            "var s = 0.0;",
            f"for (var j = max(c - {lo}, 0); j <= min(c + {hi}, {channels - 1}); j = j + 1) {{",
            f"  let v = in0[first + u32(j) * {plane}u];", "  s = s + v * v;", "}",
            f"let val = in0[idx] / pow({lit(node.attrs.get('bias', 1.0))} + "
            f"{lit(float(node.attrs.get('alpha', 1e-4)) / size)} * s, {lit(node.attrs.get('beta', 0.75))});"]
    em.launch(index_launch(em, [node.inputs[0]], node.outputs[0], body, "LRN"))
