"""Gather along an axis (negative indices wrap), indices from a device tensor or a constant."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._index import index_launch
from nnhal.device.webgpu.kernels._wgsl import strides
from nnhal.device.webgpu.kernels.base import Emitter, elem_of
from nnhal.graph.node import Node

OPS = ("Gather",)


def why_not(c: Candidate) -> str | None:
    x, ind = c.inputs[0], c.inputs[1]
    if x is None or not x.static or elem_of(x.dtype) is None:
        return "Gather needs a float32/int data tensor of known shape"
    if ind is None or not ind.static or elem_of(ind.dtype) != "i32":
        return "Gather needs int32/int64 indices of known shape"
    return None


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    data = [int(d) for d in em.shape(node.inputs[0])]
    ind = [int(d) for d in em.shape(node.inputs[1])]
    axis = int(node.attrs.get("axis", 0)) % len(data)
    st, ist = strides(data), strides(ind)
    q = len(ind)
    # output coordinates: data[:axis], indices, data[axis+1:]
    ind_index = " + ".join(f"c{axis + j} * {ist[j]}u" for j in range(q)) or "0u"
    terms = [f"c{i} * {st[i]}u" for i in range(axis)]
    terms.append(f"u32(k) * {st[axis]}u")
    terms += [f"c{axis + q + i - axis - 1} * {st[i]}u" for i in range(axis + 1, len(data))]
    body = [f"var k = in1[{ind_index}];", f"if (k < 0) {{ k = k + {data[axis]}; }}",
            # NOTE: an out-of-range index is an error in ONNX; clamped here rather than read out of bounds
            f"k = clamp(k, 0, {data[axis] - 1});",
            f"let val = in0[{' + '.join(terms)}];"]
    em.launch(index_launch(em, [node.inputs[0], node.inputs[1]], node.outputs[0], body, "Gather"))
