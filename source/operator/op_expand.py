"""Expand: broadcast a tensor to a shape (bidirectionally, like numpy)."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._shape import const_ints, length_of
from nnhal.operator.base import Info, Prototype, broadcast


class Expand(Prototype):
    op_type = "Expand"
    versions = (8, 13)
    inputs = (2, 2)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, shape_info = ins
        shape = const_ints(shape_info)
        if shape is None:
            n = length_of(shape_info)
            if x.shape is None or n is None:
                return [Info(x.dtype, None)]
            return [Info(x.dtype, (None,) * max(n, len(x.shape)))]
        if any(s < 0 for s in shape):
            raise self.fail(node, f"shape {shape} has a negative dim")
        return [Info(x.dtype, broadcast(node, x.shape, tuple(shape)))]
