"""Det: determinant of each square matrix in the last two dimensions."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


class Det(Prototype):
    op_type = "Det"
    versions = (11, 22)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is None:
            return [Info(x.dtype, None)]
        if len(x.shape) < 2:
            raise self.fail(node, f"input must have rank >= 2, got shape {x.shape}")
        m, n = x.shape[-2:]
        if m is not None and n is not None and m != n:
            raise self.fail(node, f"matrices must be square, got shape {x.shape}")
        return [Info(x.dtype, tuple(x.shape[:-2]))]
