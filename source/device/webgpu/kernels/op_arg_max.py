"""ArgMax and ArgMin along one axis (first or last index of the extreme), int64 results held as i32."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._index import index_launch
from nnhal.device.webgpu.kernels.base import Emitter
from nnhal.graph.node import Node

OPS = ("ArgMax", "ArgMin")


def why_not(c: Candidate) -> str | None:
    x = c.inputs[0]
    if x is None or not x.static or x.dtype is None or x.dtype.name != "float32" or x.rank == 0:
        return f"{c.node.op_type} needs a float32 input of known shape"
    return None


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    shape = [int(d) for d in em.shape(node.inputs[0])]
    axis = int(node.attrs.get("axis", 0)) % len(shape)
    inner = 1
    for d in shape[axis + 1:]:
        inner *= d
    outer = 1
    for d in shape[:axis]:
        outer *= d
    better = ">" if node.op_type == "ArgMax" else "<"
    if node.attrs.get("select_last_index", 0):
        better += "="
    body = [f"let base = (idx / {inner}u) * {shape[axis] * inner}u + idx % {inner}u;",
            "var best = in0[base];", "var at = 0;",
            f"for (var j = 1u; j < {shape[axis]}u; j = j + 1u) {{",
            f"  let v = in0[base + j * {inner}u];",
            f"  if (v {better} best) {{ best = v; at = i32(j); }}", "}",
            "let val = at;"]
    em.launch(index_launch(em, [node.inputs[0]], node.outputs[0], body, node.op_type, (outer * inner,)))
