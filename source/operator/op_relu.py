"""Relu: y = max(x, 0)."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, same_as


class Relu(Prototype):
    op_type = "Relu"
    versions = (1, 6, 13, 14)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        return [same_as(ins[0])]
