"""Mod: elementwise remainder, with the divisor's sign (fmod=0) or the dividend's (fmod=1)."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._binary import Binary


class Mod(Binary):
    op_type = "Mod"
    versions = (10, 13, 28)
    attributes = {"fmod": 0}

    def check(self, node: Node) -> None:
        if node.attrs["fmod"] not in (0, 1):
            raise ModelError(f"{where(node)}: fmod must be 0 or 1, not {node.attrs['fmod']}")
