"""Trilu: keep the upper (or lower) triangle of the last two dims, offset by k."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, same_as


class Trilu(Prototype):
    op_type = "Trilu"
    versions = (14,)
    inputs = (1, 2)
    attributes = {"upper": 1}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.rank is not None and x.rank < 2:
            raise self.fail(node, f"input must have rank >= 2, it has rank {x.rank}")
        return [same_as(x)]
