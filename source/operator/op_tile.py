"""Tile: repeat a tensor along every axis (opset 1: ``tiles`` times along one ``axis``)."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._shape import const_ints
from nnhal.operator.base import Info, Prototype


def repeats_of(node: Node, rank: int, inputs: list) -> list[int] | None:
    """Repeats per axis from the (known) input values, else None; ValueError when malformed."""
    if node.version < 6:
        tiles, axis = inputs[1], inputs[2]
        if tiles is None or axis is None:
            return None
        reps = [1] * rank
        reps[axis[0] % rank] = tiles[0]
        return reps
    reps = inputs[1]
    if reps is None:
        return None
    if len(reps) != rank or any(r < 0 for r in reps):
        raise ValueError(f"repeats {reps} do not fit rank {rank}")
    return reps


class Tile(Prototype):
    op_type = "Tile"
    versions = (1, 6, 13)
    inputs = (2, 3)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is None:
            return [Info(x.dtype, None)]
        try:
            reps = repeats_of(node, len(x.shape), [None] + [const_ints(i) for i in ins[1:]])
        except ValueError as exc:
            raise self.fail(node, str(exc)) from exc
        if reps is None:
            return [Info(x.dtype, (None,) * len(x.shape))]
        return [Info(x.dtype, tuple(None if d is None else d * r for d, r in zip(x.shape, reps)))]
