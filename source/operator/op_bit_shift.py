"""BitShift: elementwise shift of X by Y bits, LEFT or RIGHT, with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._binary import Binary
from nnhal.operator.base import REQUIRED


class BitShift(Binary):
    op_type = "BitShift"
    versions = (11, 28)
    attributes = {"direction": REQUIRED}
    kinds = "iu"

    def check(self, node: Node) -> None:
        if node.attrs["direction"] not in ("LEFT", "RIGHT"):
            raise ModelError(f"{where(node)}: direction must be 'LEFT' or 'RIGHT', not {node.attrs['direction']!r}")
