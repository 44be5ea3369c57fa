"""ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSumExp: one invocation per output element looping
over its reduced block."""
from __future__ import annotations

from typing import Callable

import numpy as np

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._index import index_launch
from nnhal.device.webgpu.kernels._wgsl import strides
from nnhal.device.webgpu.kernels.base import Emitter
from nnhal.graph.node import Node

# op -> (initial value, combine(acc, v), finish(acc, count))
RULES = {
    "ReduceSum": ("0.0", "acc + v", "acc"),
    "ReduceMean": ("0.0", "acc + v", "acc / {count}"),
    "ReduceMax": ("bitcast<f32>(0xff800000u)", "max(acc, v)", "acc"),
    "ReduceMin": ("bitcast<f32>(0x7f800000u)", "min(acc, v)", "acc"),
    "ReduceProd": ("1.0", "acc * v", "acc"),
    "ReduceSumSquare": ("0.0", "acc + v * v", "acc"),
    "ReduceL1": ("0.0", "acc + abs(v)", "acc"),
    "ReduceL2": ("0.0", "acc + v * v", "sqrt(acc)"),
    "ReduceLogSum": ("0.0", "acc + v", "log(acc)"),
}
OPS = tuple(RULES)


def _axes(node: Node, value: Callable[[int], "np.ndarray | None"], rank: int) -> list[int] | None:
    """The reduced axes; None when they are a non-constant input."""
    if node.version >= 18 or (node.op_type == "ReduceSum" and node.version >= 13):
        if len(node.inputs) > 1 and node.inputs[1]:
            found = value(1)
            if found is None:
                return None
            axes = [int(a) for a in np.ravel(found)]
        else:
            axes = []
    else:
        axes = list(node.attrs.get("axes") or [])
    if not axes and not node.attrs.get("noop_with_empty_axes", 0):
        axes = list(range(rank))
    return sorted(a % rank for a in axes)


def why_not(c: Candidate) -> str | None:
    x = c.inputs[0]
    if x is None or not x.static or x.dtype is None or x.dtype.name != "float32":
        return f"{c.node.op_type} needs a float32 input of known shape"
    if _axes(c.node, lambda i: c.inputs[i].value if c.inputs[i] is not None else None, x.rank) is None:
        return f"{c.node.op_type}'s axes input is not a constant"
    if x.rank == 0 or 0 in x.shape:
        return f"{c.node.op_type} of an empty or scalar tensor is not implemented"
    return None


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    shape = [int(d) for d in em.shape(node.inputs[0])]
    axes = _axes(node, lambda i: em.value(node.inputs[i]), len(shape))
    kept = [i for i in range(len(shape)) if i not in axes]
    st = strides(shape)
    red_shape = [shape[a] for a in axes]
    count = int(np.prod(red_shape, dtype=np.int64))
    init, combine, finish = RULES[node.op_type]
    out_shape = tuple(shape[i] for i in kept)
    base = " + ".join(f"c{j} * {st[i]}u" for j, i in enumerate(kept)) or "0u"
    offs = []
    rst = strides(red_shape)
    for j, a in enumerate(axes):
        offs.append(f"((r / {rst[j]}u) % {red_shape[j]}u) * {st[a]}u")
    body = [f"let base = {base};", f"var acc = {init};",
            f"for (var r = 0u; r < {count}u; r = r + 1u) {{",
            f"  let v = in0[base + {' + '.join(offs) or '0u'}];",
            f"  acc = {combine};", "}",
            f"let val = {finish.format(count=float(count))};"]
    em.launch(index_launch(em, [node.inputs[0]], node.outputs[0], body, node.op_type, out_shape or (1,)))
