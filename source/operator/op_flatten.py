"""Flatten: a 2-D view, dims before ``axis`` in rows and the rest in columns."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._shape import product
from nnhal.operator.base import Info, Prototype


def flatten_axis(node: Node, rank: int) -> int:
    """The split axis in [0, rank]; ValueError when out of range."""
    axis = node.attrs["axis"]
    if not -rank <= axis <= rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


class Flatten(Prototype):
    op_type = "Flatten"
    versions = (1, 9, 11, 13, 21, 23, 24, 25)
    attributes = {"axis": 1}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is None:
            return [Info(x.dtype, (None, None))]
        try:
            axis = flatten_axis(node, len(x.shape))
        except ValueError as exc:
            raise self.fail(node, str(exc)) from exc
        return [Info(x.dtype, (product(x.shape[:axis]), product(x.shape[axis:])))]
