"""LpNormalization: divide by the L1 or L2 norm along one axis."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._nn import same_float
from nnhal.operator.base import Info, Prototype, normalize_axis


class LpNormalization(Prototype):
    op_type = "LpNormalization"
    versions = (1, 22)
    attributes = {"axis": -1, "p": 2}

    def check(self, node: Node) -> None:
        if node.attrs["p"] not in (1, 2):
            raise ModelError(f"{where(node)}: p must be 1 or 2, got {node.attrs['p']}")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        if ins[0].shape is not None:
            normalize_axis(node, node.attrs["axis"], len(ins[0].shape))
        return same_float(self, node, ins)
