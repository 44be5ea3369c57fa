"""Gelu: y = x * Phi(x), exactly (erf) or by the tanh approximation."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._unary import Unary


class Gelu(Unary):
    op_type = "Gelu"
    versions = (20,)
    attributes = {"approximate": "none"}

    def check(self, node: Node) -> None:
        if node.attrs["approximate"] not in ("none", "tanh"):
            raise ModelError(f"{where(node)}: approximate must be 'none' or 'tanh', got '{node.attrs['approximate']}'")
