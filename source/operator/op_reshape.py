"""Reshape: the same data with a new shape (0 copies a dim unless allowzero, -1 is inferred)."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator._shape import const_ints, length_of, product, unknown
from nnhal.operator.base import Info, Prototype

MAX_RANK = 64   # numpy's limit on array dims


def target_shape(node: Node, in_shape: tuple, shape: list[int]) -> tuple:
    """Output dims for a requested shape; None dims where the input's are unknown."""
    allowzero = node.attrs.get("allowzero", 0)
    if shape.count(-1) > 1:
        raise ValueError(f"shape {shape} has more than one -1")
    if allowzero and -1 in shape and 0 in shape:
        raise ValueError(f"shape {shape} has both 0 and -1 with allowzero=1")
    dims: list[int | None] = []
    for i, s in enumerate(shape):
        if s == 0 and not allowzero:
            if i >= len(in_shape):
                raise ValueError(f"shape {shape} copies dim {i} of a rank-{len(in_shape)} input")
            dims.append(in_shape[i])
        elif s < -1:
            raise ValueError(f"shape {shape} has a negative dim other than -1")
        else:
            dims.append(s)
    if -1 in dims:
        i = dims.index(-1)
        total = product(in_shape)
        rest = product(dims[:i] + dims[i + 1:])
        if total is None or rest is None:
            dims[i] = None
        elif rest == 0 or total % rest:
            raise ValueError(f"cannot reshape {tuple(in_shape)} into {shape}")
        else:
            dims[i] = total // rest
    total, new = product(in_shape), product(dims)
    if total is not None and new is not None and total != new:
        raise ValueError(f"cannot reshape {tuple(in_shape)} ({total} elements) into {shape} ({new})")
    return tuple(dims)


class Reshape(Prototype):
    op_type = "Reshape"
    versions = (1, 5, 13, 14, 19, 21, 23, 24, 25)
    inputs = (1, 2)

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version < 5:
            return {"shape": None}
        return {"allowzero": 0} if version >= 14 else {}

    def requested(self, node: Node, ins: list[Info | None]) -> list[int] | None:
        """The requested shape when known (attribute before opset 5, else the constant input)."""
        if node.version < 5:
            return list(node.attrs["shape"] or [])
        return const_ints(ins[1] if len(ins) > 1 else None)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if node.version >= 5 and (len(ins) < 2 or ins[1] is None):
            raise self.fail(node, "the shape input is missing")
        shape = self.requested(node, ins)
        if shape is None:
            rank = length_of(ins[1])
            if rank is not None and rank > MAX_RANK:
                raise self.fail(node, f"the shape input has {rank} values; numpy arrays have at most {MAX_RANK} dims")
            return [unknown(x.dtype, rank)]
        if x.shape is None:
            allowzero = node.attrs.get("allowzero", 0)
            return [Info(x.dtype, tuple(s if s > 0 or (s == 0 and allowzero) else None for s in shape))]
        try:
            return [Info(x.dtype, target_shape(node, x.shape, shape))]
        except ValueError as exc:
            raise self.fail(node, str(exc)) from exc
