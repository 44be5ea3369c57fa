"""PRelu: y = x for x >= 0, slope * x otherwise; slope broadcasts to x."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._unary import NUMERIC, check_kind
from nnhal.operator.base import Info, Prototype, broadcast


class PRelu(Prototype):
    op_type = "PRelu"
    versions = (1, 6, 7, 9, 16)
    inputs = (2, 2)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, slope = ins
        check_kind(self, node, x, NUMERIC)
        if x.dtype is not None and slope.dtype is not None and x.dtype != slope.dtype:
            raise self.fail(node, f"input dtype {x.dtype} and slope dtype {slope.dtype} differ")
        shape = broadcast(node, x.shape, slope.shape)
        if shape is not None and x.shape is not None and len(shape) != len(x.shape):
            raise self.fail(node, f"slope of shape {slope.shape} does not broadcast to input shape {x.shape}")
        if shape is not None and x.static and shape != tuple(x.shape):
            raise self.fail(node, f"slope of shape {slope.shape} does not broadcast to input shape {x.shape}")
        return [Info(x.dtype, shape)]
