"""NonZero: the indices of the non-zero elements, one row per input axis."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._shape import INT64
from nnhal.operator.base import Info, Prototype


class NonZero(Prototype):
    op_type = "NonZero"
    versions = (9, 13)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        return [Info(INT64, (ins[0].rank, None))]
