"""Gather: take entries of ``data`` along an axis at the given (possibly negative) indices."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, normalize_axis


class Gather(Prototype):
    op_type = "Gather"
    versions = (1, 11, 13)
    inputs = (2, 2)
    attributes = {"axis": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        data, indices = ins
        if data.shape is None or indices.shape is None:
            return [Info(data.dtype, None)]
        if not data.shape:
            raise self.fail(node, "data is a scalar; it needs rank >= 1")
        axis = normalize_axis(node, node.attrs["axis"], len(data.shape))
        return [Info(data.dtype, data.shape[:axis] + indices.shape + data.shape[axis + 1:])]
