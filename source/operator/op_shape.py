"""Shape: the shape of a tensor as a 1-D int64 tensor, optionally a [start, end) slice of it."""
from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._shape import INT64
from nnhal.operator.base import Info, Prototype


def shape_range(node: Node, rank: int) -> tuple[int, int]:
    """The clamped [start, end) of the dims Shape reports (opset 15 start/end attributes)."""
    start = node.attrs.get("start", 0)
    end = node.attrs.get("end")
    return slice(start, end).indices(rank)[:2]


class Shape(Prototype):
    op_type = "Shape"
    versions = (1, 13, 15, 19, 21, 23, 24, 25)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"start": 0, "end": None} if version >= 15 else {}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is None:
            return [Info(INT64, (None,))]
        start, end = shape_range(node, len(x.shape))
        dims = x.shape[start:end] if end > start else ()
        if all(d is not None for d in dims):
            return [Info.of(np.array(dims, dtype=np.int64))]
        return [Info(INT64, (len(dims),))]
