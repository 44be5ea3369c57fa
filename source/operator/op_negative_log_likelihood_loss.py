"""NegativeLogLikelihoodLoss: -input[n, target[n], d...] * weight, reduced by none, sum or mean."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._reduce import LossPrototype
from nnhal.operator.base import Info


class NegativeLogLikelihoodLoss(LossPrototype):
    op_type = "NegativeLogLikelihoodLoss"
    versions = (12, 13, 22)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        return [self.loss_info(node, ins)]
