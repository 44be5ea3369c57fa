"""InstanceNormalization: normalize each (sample, channel) over the spatial axes."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._nn import same_float
from nnhal.operator.base import Info, Prototype


class InstanceNormalization(Prototype):
    op_type = "InstanceNormalization"
    versions = (1, 6, 22)
    inputs = (3, 3)
    attributes = {"epsilon": 1e-5}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        return same_float(self, node, ins)
