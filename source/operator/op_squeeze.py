"""Squeeze: drop size-1 dims (the given axes, else all of them)."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator._shape import const_ints, norm_axes, present
from nnhal.operator.base import Info, Prototype


class Squeeze(Prototype):
    op_type = "Squeeze"
    versions = (1, 11, 13, 21, 23, 24, 25)
    inputs = (1, 2)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"axes": None} if version < 13 else {}

    def axes(self, node: Node, ins: list[Info | None]) -> tuple[bool, list[int] | None]:
        """(given, axes): whether axes are given, and their value when known."""
        if node.version < 13:
            axes = node.attrs["axes"]
            return axes is not None, axes
        info = present(ins, 1)
        return info is not None, const_ints(info)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        given, axes = self.axes(node, ins)
        if x.shape is None or (given and axes is None):
            return [Info(x.dtype, None)]
        if not given:
            if any(d is None for d in x.shape):
                return [Info(x.dtype, None)]
            return [Info(x.dtype, tuple(d for d in x.shape if d != 1))]
        axes = norm_axes(node, axes, len(x.shape))
        for a in axes:
            if x.shape[a] not in (1, None):
                raise self.fail(node, f"cannot squeeze axis {a} of size {x.shape[a]}")
        return [Info(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))]
