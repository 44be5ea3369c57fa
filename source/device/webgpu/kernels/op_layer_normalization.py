"""LayerNormalization (with its optional Mean and InvStdDev outputs) and RMSNormalization over the
trailing axes: one workgroup per row, reductions through workgroup memory, then scale and bias."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._rows import THREADS, reduce_step, row_launch
from nnhal.device.webgpu.kernels._wgsl import lit
from nnhal.device.webgpu.kernels.base import Emitter
from nnhal.graph.node import Node

OPS = ("LayerNormalization", "RMSNormalization")


def why_not(c: Candidate) -> str | None:
    op = c.node.op_type
    for i, info in enumerate(c.inputs):
        if c.node.inputs[i] and (info is None or not info.static or info.dtype is None or info.dtype.name != "float32"):
            return f"{op} input {i} must be float32 of known shape"
    if any(o is not None and o.dtype is not None and o.dtype.name != "float32" for o in c.outputs):
        return f"{op} outputs must be float32"
    return None


def _param(em: Emitter, i: int, name: str) -> str:
    """scale and bias broadcast (numpy rules) against the normalised block: index by the trailing elements."""
    size = 1
    for d in em.shape(name):
        size *= int(d)
    return f"in{i}[j % {size}u]"


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    shape = [int(d) for d in em.shape(node.inputs[0])]
    axis = int(node.attrs.get("axis", -1)) % len(shape)
    rows = length = 1
    for d in shape[:axis]:
        rows *= d
    for d in shape[axis:]:
        length *= d
    inputs = [(node.inputs[0], "f32"), (node.inputs[1], "f32")]
    bias = "0.0"
    if len(node.inputs) > 2 and node.inputs[2]:
        inputs.append((node.inputs[2], "f32"))
        bias = _param(em, 2, node.inputs[2])
    eps = lit(float(node.attrs.get("epsilon", 1e-5)))
    outputs = [(o, "f32") for o in node.outputs if o]
    if node.op_type == "RMSNormalization":
        center = ""
        stats = f"""  var q = 0.0;
  for (var j = lid; j < L; j = j + {THREADS}u) {{ let d = in0[base + j]; q = q + d * d; }}
{reduce_step("q", "+")}  let mean = 0.0;
"""
    else:
        center = " - mean"
        stats = f"""  var s = 0.0;
  for (var j = lid; j < L; j = j + {THREADS}u) {{ s = s + in0[base + j]; }}
{reduce_step("s", "+")}  let mean = s_all / {float(length)};
  var q = 0.0;
  for (var j = lid; j < L; j = j + {THREADS}u) {{ let d = in0[base + j] - mean; q = q + d * d; }}
{reduce_step("q", "+")}"""
    extra = ""
    if len(node.outputs) > 1 and node.outputs[1]:
        extra += "  if (lid == 0u) { out1[r] = mean; }\n"
    if len(node.outputs) > 2 and node.outputs[2]:
        extra += f"  if (lid == 0u) {{ out{len(outputs) - 1}[r] = inv; }}\n"
    body = f"""{stats}  let inv = inverseSqrt(q_all / {float(length)} + {eps});
{extra}  for (var j = lid; j < L; j = j + {THREADS}u) {{
    out[base + j] = (in0[base + j]{center}) * inv * {_param(em, 1, node.inputs[1])} + {bias};
  }}
"""
    em.launch(row_launch(inputs, outputs, rows, length, 1, body, node.op_type))
