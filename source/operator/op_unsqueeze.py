"""Unsqueeze: insert size-1 dims at the given axes of the output."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator._shape import const_ints, length_of, norm_axes, unknown
from nnhal.operator.base import REQUIRED, Info, Prototype


def unsqueezed(node: Node, shape: tuple, axes: list[int]) -> tuple:
    """The output shape: ``shape`` with 1s inserted at ``axes`` (of the output rank)."""
    rank = len(shape) + len(axes)
    axes = set(norm_axes(node, axes, rank))
    dims = iter(shape)
    return tuple(1 if i in axes else next(dims) for i in range(rank))


class Unsqueeze(Prototype):
    op_type = "Unsqueeze"
    versions = (1, 11, 13, 21, 23, 24, 25)
    inputs = (1, 2)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"axes": REQUIRED} if version < 13 else {}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if node.version < 13:
            axes = list(node.attrs["axes"])
        else:
            if len(ins) < 2 or ins[1] is None:
                raise self.fail(node, "the axes input is missing")
            axes = const_ints(ins[1])
        if x.shape is None or axes is None:
            count = len(axes) if axes is not None else length_of(ins[1])
            rank = None if x.shape is None or count is None else len(x.shape) + count
            return [unknown(x.dtype, rank)]
        return [Info(x.dtype, unsqueezed(node, x.shape, axes))]
