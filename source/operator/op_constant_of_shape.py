"""ConstantOfShape: a tensor of the given shape filled with one value (float32 0 by default)."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._shape import const_ints, length_of
from nnhal.operator.base import Info, Prototype


def fill_value(node: Node) -> np.ndarray:
    """The one-element fill value as a 0-d array."""
    value = node.attrs["value"]
    if value is None:
        return np.zeros((), dtype=np.float32)
    value = np.asarray(value)
    if value.size != 1:
        raise ValueError(f"value must hold one element, it has {value.size}")
    return value.reshape(())


class ConstantOfShape(Prototype):
    op_type = "ConstantOfShape"
    versions = (9, 20, 21, 23, 24, 25)
    attributes = {"value": None}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        try:
            dtype = fill_value(node).dtype
        except ValueError as exc:
            raise self.fail(node, str(exc)) from exc
        shape = const_ints(ins[0])
        if shape is None:
            n = length_of(ins[0])
            return [Info(dtype, None if n is None else (None,) * n)]
        if any(s < 0 for s in shape):
            raise self.fail(node, f"shape {shape} has a negative dim")
        if int(np.prod([s for s in shape if s], dtype=object)) * dtype.itemsize > np.iinfo(np.intp).max:
            raise self.fail(node, f"shape {shape} is beyond any array size")
        return [Info(dtype, tuple(shape))]
