"""Scatter: the deprecated name of ScatterElements without reduction."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype
from nnhal.operator.op_scatter_elements import ScatterElements


class Scatter(Prototype):
    op_type = "Scatter"
    versions = (9, 11)
    inputs = (3, 3)
    attributes = {"axis": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        return ScatterElements().infer(node, ins)
