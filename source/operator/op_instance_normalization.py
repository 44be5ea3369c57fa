"""InstanceNormalization: normalize each (sample, channel) over the spatial axes."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._nn import same_float
from nnhal.operator.base import Info, Prototype, expect_shape


class InstanceNormalization(Prototype):
    op_type = "InstanceNormalization"
    versions = (1, 6, 22)
    inputs = (3, 3)
    attributes = {"epsilon": 1e-5}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is not None:
            if len(x.shape) < 3:
                raise self.fail(node, f"input rank {len(x.shape)} is below 3 (N, C, spatial...)")
            expect_shape(node, ins[1], (x.shape[1],), "scale")
            expect_shape(node, ins[2], (x.shape[1],), "B")
        return same_float(self, node, ins)
