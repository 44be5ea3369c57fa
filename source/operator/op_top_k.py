"""TopK: the k largest (or smallest) elements along an axis and their indices; ties by lower index."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator._shape import INT64, const_ints
from nnhal.operator.base import REQUIRED, Info, Prototype, normalize_axis


class TopK(Prototype):
    op_type = "TopK"
    versions = (1, 10, 11, 24)
    inputs = (1, 2)
    outputs = (2, 2)

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version < 10:
            return {"axis": -1, "k": REQUIRED}
        if version < 11:
            return {"axis": -1}
        return {"axis": -1, "largest": 1, "sorted": 1}

    def k_of(self, node: Node, ins: list[Info | None]) -> int | None:
        """k when known: the attribute before opset 10, else the constant K input."""
        if node.version < 10:
            return node.attrs["k"]
        if len(ins) < 2 or ins[1] is None:
            raise self.fail(node, "the K input is missing")
        if ins[1].shape is not None and (len(ins[1].shape) > 1 or ins[1].shape not in ((), (1,), (None,))):
            raise self.fail(node, f"K must hold one value, it has shape {ins[1].shape}")
        k = const_ints(ins[1])
        return None if k is None else k[0]

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        k = self.k_of(node, ins)
        if x.shape is None:
            return [Info(x.dtype, None), Info(INT64, None)]
        if not x.shape:
            raise self.fail(node, "input is a scalar; it needs rank >= 1")
        axis = normalize_axis(node, node.attrs["axis"], len(x.shape))
        dim = x.shape[axis]
        if k is not None and (k < 0 or (dim is not None and k > dim)):
            raise self.fail(node, f"k = {k} is out of range for an axis of size {dim}")
        shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
        return [Info(x.dtype, shape), Info(INT64, shape)]
