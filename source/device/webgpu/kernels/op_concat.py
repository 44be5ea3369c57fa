"""Concat and Split: one copy launch per piece, each moving a slab along the axis."""
from __future__ import annotations

import numpy as np

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._index import index_launch
from nnhal.device.webgpu.kernels._wgsl import strides
from nnhal.device.webgpu.kernels.base import Emitter, elem_of
from nnhal.graph.node import Node

OPS = ("Concat", "Split")


def why_not(c: Candidate) -> str | None:
    for i, info in enumerate(c.inputs[:1] if c.node.op_type == "Split" else c.inputs):
        if info is None or not info.static or elem_of(info.dtype) is None:
            return f"{c.node.op_type} input {i} must be float32/int of known shape"
    if c.node.op_type == "Split" and any(o is None or not o.static for o in c.outputs):
        return "Split outputs must have known shapes"
    return None


def _copy(em: Emitter, src: str, dst: str, shape: tuple[int, ...], axis: int, offset: int, into: bool) -> None:
    """Copy ``shape`` between src and dst, one of which is offset by ``offset`` along ``axis``.

    Both sides are runs of contiguous blocks: element idx of the piece is at
    (idx / block) * big_block + offset * stride + idx % block in the other tensor."""
    big = em.shape(dst) if into else em.shape(src)
    stride = strides(big)[axis]
    block, big_block = int(shape[axis]) * stride, int(big[axis]) * stride
    shift = f" + {offset * stride}u" if offset else ""
    big_index = f"(idx / {block}u) * {big_block}u + idx % {block}u{shift}" if block != big_block else f"idx{shift}"
    total = (int(np.prod(shape, dtype=np.int64)),)
    if into:
        em.launch(index_launch(em, [src], dst, ["let val = in0[idx];"], "Concat", total, store=big_index))
    else:
        em.launch(index_launch(em, [src], dst, [f"let val = in0[{big_index}];"], "Split", total))


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    if node.op_type == "Concat":
        out = node.outputs[0]
        axis = int(node.attrs["axis"]) % len(em.shape(out))
        offset = 0
        for name in node.inputs:
            shape = em.shape(name)
            if shape[axis] > 0:
                _copy(em, name, out, shape, axis, offset, True)
            offset += int(shape[axis])
        return
    src = node.inputs[0]
    axis = int(node.attrs.get("axis", 0)) % len(em.shape(src))
    offset = 0
    for name in node.outputs:
        if not name:
            continue
        shape = em.shape(name)
        if shape[axis] > 0:
            _copy(em, src, name, shape, axis, offset, False)
        offset += int(shape[axis])
