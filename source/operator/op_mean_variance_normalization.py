"""MeanVarianceNormalization: (x - mean) / (std + 1e-9) over the given axes."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._nn import same_float
from nnhal.operator.base import Info, Prototype, normalize_axis


class MeanVarianceNormalization(Prototype):
    op_type = "MeanVarianceNormalization"
    versions = (9, 13)
    attributes = {"axes": [0, 2, 3]}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        if ins[0].shape is not None:
            for a in node.attrs["axes"]:
                normalize_axis(node, a, len(ins[0].shape))
        return same_float(self, node, ins)
