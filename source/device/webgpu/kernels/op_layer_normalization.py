"""LayerNormalization over the trailing axes: mean, then variance of the centred row, then scale and bias."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._rows import THREADS, reduce_step, row_launch
from nnhal.device.webgpu.kernels._wgsl import lit
from nnhal.device.webgpu.kernels.base import Emitter
from nnhal.graph.node import Node

OPS = ("LayerNormalization",)


def why_not(c: Candidate) -> str | None:
    x = c.inputs[0]
    if x is None or not x.static or x.dtype is None or x.dtype.name != "float32":
        return "LayerNormalization needs a float32 input of known shape"
    if len([o for o in c.node.outputs if o]) > 1:
        return "LayerNormalization's Mean and InvStdDev outputs are not implemented"
    for i, info in enumerate(c.inputs[1:3], 1):
        if info is None or not info.static or info.dtype is None or info.dtype.name != "float32":
            return f"LayerNormalization input {i} must be float32 of known shape"
    return None


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    shape = [int(d) for d in em.shape(node.inputs[0])]
    axis = int(node.attrs.get("axis", -1)) % len(shape)
    rows = length = 1
    for d in shape[:axis]:
        rows *= d
    for d in shape[axis:]:
        length *= d
    inputs = [(node.inputs[0], "f32"), (node.inputs[1], "f32")]

    def param(i: int, name: str) -> str:
        # scale and bias broadcast (numpy rules) against the normalised [length] block
        size = 1
        for d in em.shape(name):
            size *= int(d)
        return f"in{i}[j % {size}u]"

    bias = "0.0"
    if len(node.inputs) > 2 and node.inputs[2]:
        inputs.append((node.inputs[2], "f32"))
        bias = param(2, node.inputs[2])
    eps = lit(float(node.attrs.get("epsilon", 1e-5)))
    body = f"""  var s = 0.0;
  for (var j = lid; j < L; j = j + {THREADS}u) {{ s = s + in0[base + j]; }}
{reduce_step("s", "+")}  let mean = s_all / {float(length)};
  var q = 0.0;
  for (var j = lid; j < L; j = j + {THREADS}u) {{ let d = in0[base + j] - mean; q = q + d * d; }}
{reduce_step("q", "+")}  let inv = inverseSqrt(q_all / {float(length)} + {eps});
  for (var j = lid; j < L; j = j + {THREADS}u) {{
    out[base + j] = (in0[base + j] - mean) * inv * {param(1, node.inputs[1])} + {bias};
  }}
"""
    em.launch(row_launch(inputs, (node.outputs[0], "f32"), rows, length, 1, body, "LayerNormalization"))
