"""Add: elementwise sum with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, broadcast


class Add(Prototype):
    op_type = "Add"
    versions = (7, 13, 14)
    inputs = (2, 2)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        a, b = ins
        if a.dtype != b.dtype:
            raise self.fail(node, f"inputs have different dtypes {a.dtype} and {b.dtype}")
        return [Info(a.dtype, broadcast(node, a.shape, b.shape))]
