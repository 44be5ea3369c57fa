"""Cast between float32, the integer types and bool (int64 is held as i32 on the device, bool as i32 0/1)."""
from __future__ import annotations

import numpy as np

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels.base import Emitter, elem_of
from nnhal.graph.node import Node


def _expr(node: Node, a: list[str], em: Emitter) -> str:
    src, dst = em.elem(node.inputs[0]), em.elem(node.outputs[0])
    if em.is_bool(node.outputs[0]):
        return f"select(0, 1, {a[0]} != 0)"
    if src == dst:
        return a[0]
    # NOTE: WGSL's f32 -> i32 conversion truncates toward zero and saturates, as ONNX Cast truncates
    return f"{dst}({a[0]})"


EXPRS = {"Cast": _expr}
OPS = tuple(EXPRS)


def why_not(c: Candidate) -> str | None:
    src = c.inputs[0].dtype if c.inputs[0] is not None else None
    dst = c.outputs[0].dtype
    if elem_of(src) is None or elem_of(dst) is None:
        return f"Cast {src} -> {dst}: webgpu holds float32, int32 and int64 only"
    if np.dtype(dst) == np.int64 and np.dtype(src).kind == "f":
        return "Cast float -> int64 could exceed the device's int32 storage"
    return None
