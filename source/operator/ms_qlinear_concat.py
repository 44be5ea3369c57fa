"""QLinearConcat (com.microsoft): concatenation requantizing every input to the output's parameters."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator.base import REQUIRED, Info, Prototype, normalize_axis


class QLinearConcat(Prototype):
    op_type = "QLinearConcat"
    domain = "com.microsoft"
    versions = (1,)
    inputs = (5, -1)
    attributes = {"axis": REQUIRED}

    def check(self, node: Node) -> None:
        if (len(node.inputs) - 2) % 3:
            raise ModelError(f"{where(node)}: inputs must be y_scale, y_zero_point, then (tensor, scale, zero) triples")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        parts = ins[2::3]
        first = parts[0]
        if any(p.shape is None for p in parts):
            return [Info(first.dtype, None)]
        axis = normalize_axis(node, node.attrs["axis"], len(first.shape))
        size = 0
        for p in parts:
            if p.shape[axis] is None:
                size = None
                break
            size += p.shape[axis]
        return [Info(first.dtype, first.shape[:axis] + (size,) + first.shape[axis + 1:])]
