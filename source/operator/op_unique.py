"""Unique: unique elements (or slices along an axis), first-occurrence indices, inverse map, counts."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._shape import INT64, product
from nnhal.operator.base import Info, Prototype, normalize_axis


class Unique(Prototype):
    op_type = "Unique"
    versions = (11, 28)
    outputs = (1, 4)
    attributes = {"axis": None, "sorted": 1}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        axis = node.attrs["axis"]
        if axis is None:
            y = Info(x.dtype, (None,))
            total = None if x.shape is None else product(x.shape)
        elif x.shape is None:
            y, total = Info(x.dtype, None), None
        else:
            axis = normalize_axis(node, axis, len(x.shape))
            y = Info(x.dtype, x.shape[:axis] + (None,) + x.shape[axis + 1:])
            total = x.shape[axis]
        return [y, Info(INT64, (None,)), Info(INT64, (total,)), Info(INT64, (None,))][:len(node.outputs)]
