"""RMSNormalization: x / sqrt(mean(x^2) + epsilon) * scale over the trailing axes."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._nn import same_float, stash_dtype
from nnhal.operator.base import Info, Prototype, normalize_axis


class RMSNormalization(Prototype):
    op_type = "RMSNormalization"
    versions = (23,)
    inputs = (2, 2)
    attributes = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        stash_dtype(self, node)
        if ins[0].shape is not None:
            normalize_axis(node, node.attrs["axis"], len(ins[0].shape))
        return same_float(self, node, ins)
