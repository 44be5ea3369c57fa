"""Softmax and LogSoftmax: max, sum of exponentials, then the normalised pass, per row."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._rows import THREADS, reduce_step, row_launch
from nnhal.device.webgpu.kernels.base import Emitter
from nnhal.graph.node import Node

OPS = ("Softmax", "LogSoftmax")


def why_not(c: Candidate) -> str | None:
    x = c.inputs[0]
    if x is None or not x.static or x.dtype is None or x.dtype.name != "float32":
        return f"{c.node.op_type} needs a float32 input of known shape"
    return None


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    shape = [int(d) for d in em.shape(node.inputs[0])]
    rank = len(shape)
    axis = int(node.attrs.get("axis", -1 if node.version >= 13 else 1)) % max(rank, 1)
    outer = 1
    for d in shape[:axis]:
        outer *= d
    rest = 1
    for d in shape[axis + 1:]:
        rest *= d
    # NOTE: before opset 13 the op normalises the flattened [outer, prod(shape[axis:])] rows
    length, inner = (shape[axis], rest) if node.version >= 13 else (shape[axis] * rest, 1)
    rows = outer * inner if node.version >= 13 else outer
    final = "log(s_all) * -1.0 + (in0[i] - m_all)" if node.op_type == "LogSoftmax" else "exp(in0[i] - m_all) / s_all"
    body = f"""  var m = bitcast<f32>(0xff800000u);
  for (var j = lid; j < L; j = j + {THREADS}u) {{ m = max(m, in0[base + j * INNER]); }}
{reduce_step("m", "max")}  var s = 0.0;
  for (var j = lid; j < L; j = j + {THREADS}u) {{ s = s + exp(in0[base + j * INNER] - m_all); }}
{reduce_step("s", "+")}  for (var j = lid; j < L; j = j + {THREADS}u) {{
    let i = base + j * INNER;
    out[i] = {final};
  }}
"""
    em.launch(row_launch([(node.inputs[0], "f32")], [(node.outputs[0], "f32")], rows, length, inner, body,
                         node.op_type))
