"""OneHot: expand indices into one-hot vectors of [off_value, on_value] along a new axis."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


def one_hot_axis(node: Node, rank: int) -> int:
    """The new axis in [0, rank] of the output; ValueError when out of range."""
    axis = node.attrs["axis"]
    if not -rank - 1 <= axis <= rank:
        raise ValueError(f"axis {axis} is out of range for indices of rank {rank}")
    return axis + rank + 1 if axis < 0 else axis


def depth_of(depth: np.ndarray) -> int:
    """The scalar depth (any numeric type) as an int; ValueError when not positive."""
    d = int(np.asarray(depth).reshape(-1)[0])
    if d < 1:
        raise ValueError(f"depth {d} is not positive")
    return d


class OneHot(Prototype):
    op_type = "OneHot"
    versions = (9, 11, 28)
    inputs = (3, 3)
    attributes = {"axis": -1}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        indices, depth, values = ins
        if indices.shape is None:
            return [Info(values.dtype, None)]
        try:
            axis = one_hot_axis(node, len(indices.shape))
            size = None if depth.value is None else depth_of(depth.value)
        except ValueError as exc:
            raise self.fail(node, str(exc)) from exc
        return [Info(values.dtype, indices.shape[:axis] + (size,) + indices.shape[axis:])]
