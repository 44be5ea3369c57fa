"""LRN: local response normalization across channels."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._nn import same_float
from nnhal.operator.base import REQUIRED, Info, Prototype


class LRN(Prototype):
    op_type = "LRN"
    versions = (1, 13)
    attributes = {"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": REQUIRED}

    def check(self, node: Node) -> None:
        if node.attrs["size"] < 1:
            raise ModelError(f"{where(node)}: size must be >= 1, got {node.attrs['size']}")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        if ins[0].shape is not None and len(ins[0].shape) < 2:
            raise self.fail(node, f"input rank {len(ins[0].shape)} is below 2 (N, C, ...)")
        return same_float(self, node, ins)
