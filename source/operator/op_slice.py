"""Slice: a strided sub-tensor (starts, ends, axes, steps; attributes before opset 10)."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator._shape import const_ints, norm_axes, present, slice_params
from nnhal.operator.base import REQUIRED, Info, Prototype


def slice_spec(node: Node, rank: int, starts: list[int], ends: list[int], axes: list[int] | None,
               steps: list[int] | None) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) per sliced axis, unclamped; ValueError when inconsistent."""
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    if any(s == 0 for s in steps):
        raise ValueError("a step is 0")
    axes = norm_axes(node, axes, rank)
    return list(zip(axes, starts, ends, steps))


class Slice(Prototype):
    op_type = "Slice"
    versions = (1, 10, 11, 13)
    inputs = (1, 5)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"starts": REQUIRED, "ends": REQUIRED, "axes": None} if version < 10 else {}

    def params(self, node: Node, ins: list[Info | None]) -> tuple | None:
        """(starts, ends, axes, steps) when all given ones are known, else None."""
        if node.version < 10:
            axes = node.attrs["axes"]
            return list(node.attrs["starts"]), list(node.attrs["ends"]), None if axes is None else list(axes), None
        if present(ins, 1) is None or present(ins, 2) is None:
            raise self.fail(node, "starts and ends are required inputs")
        values = [const_ints(present(ins, i)) for i in range(1, 5)]
        for i in range(4):
            if present(ins, i + 1) is not None and values[i] is None:
                return None
        return tuple(values)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is None:
            return [Info(x.dtype, None)]
        params = self.params(node, ins)
        if params is None:
            return [Info(x.dtype, (None,) * len(x.shape))]
        try:
            spec = slice_spec(node, len(x.shape), *params)
        except ValueError as exc:
            raise self.fail(node, str(exc)) from exc
        dims = list(x.shape)
        for axis, start, end, step in spec:
            dims[axis] = None if dims[axis] is None else slice_params(start, end, step, dims[axis])[2]
        return [Info(x.dtype, tuple(dims))]
