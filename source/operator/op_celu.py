"""Celu: y = max(0, x) + min(0, alpha * (e^(x / alpha) - 1))."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._unary import Unary


class Celu(Unary):
    op_type = "Celu"
    versions = (12, 28)
    attributes = {"alpha": 1.0}

    def check(self, node: Node) -> None:
        if node.attrs["alpha"] == 0:
            raise ModelError(f"{where(node)}: alpha must not be 0")
