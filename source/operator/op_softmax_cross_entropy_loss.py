"""SoftmaxCrossEntropyLoss: NegativeLogLikelihoodLoss of the log-softmax over axis 1."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._reduce import LossPrototype
from nnhal.operator.base import Info, same_as


class SoftmaxCrossEntropyLoss(LossPrototype):
    op_type = "SoftmaxCrossEntropyLoss"
    versions = (12, 13)
    outputs = (1, 2)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        return [self.loss_info(node, ins), same_as(ins[0])]
