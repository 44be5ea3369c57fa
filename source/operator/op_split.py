"""Split: cut a tensor into parts along an axis (given sizes, or equal parts)."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator._shape import const_ints, present
from nnhal.operator.base import Info, Prototype, normalize_axis


def split_sizes(node: Node, dim: int, split: list[int] | None, count: int) -> list[int]:
    """Part sizes along the axis: explicit ``split``, else num_outputs or ``count`` equal parts."""
    if split is not None:
        if len(split) != count or sum(split) != dim or any(s < 0 for s in split):
            raise ValueError(f"split {split} does not cut a dim of {dim} into {count} parts")
        return split
    parts = node.attrs.get("num_outputs") or count
    if parts != count:
        raise ValueError(f"num_outputs {parts} differs from the {count} outputs")
    if node.version >= 18 and node.attrs.get("num_outputs"):
        chunk = -(-dim // parts)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(parts)]
        if sum(sizes) != dim:
            raise ValueError(f"a dim of {dim} cannot be cut into {parts} parts of {chunk}")
        return sizes
    if dim % parts:
        raise ValueError(f"a dim of {dim} does not split into {parts} equal parts")
    return [dim // parts] * parts


class Split(Prototype):
    op_type = "Split"
    versions = (1, 2, 11, 13, 18)
    inputs = (1, 2)
    outputs = (1, -1)

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version >= 18:
            return {"axis": 0, "num_outputs": None}
        if version >= 13:
            return {"axis": 0}
        return {"axis": 0, "split": None}

    def requested(self, node: Node, ins: list[Info | None]) -> tuple[bool, list[int] | None]:
        """(given, split): whether explicit sizes are given, and their value when known."""
        info = present(ins, 1)
        if node.version >= 13 or info is not None:
            return info is not None, const_ints(info)
        split = node.attrs.get("split")
        return bool(split), list(split) if split else None

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        count = len(node.outputs)
        if x.shape is None:
            return [Info(x.dtype, None) for _ in range(count)]
        if not x.shape:
            raise self.fail(node, "input is a scalar; it needs rank >= 1")
        axis = normalize_axis(node, node.attrs["axis"], len(x.shape))
        given, split = self.requested(node, ins)
        dim = x.shape[axis]
        if (given and split is None) or dim is None:
            sizes: list[int | None] = list(split) if split is not None else [None] * count
        else:
            try:
                sizes = split_sizes(node, dim, split, count)
            except ValueError as exc:
                raise self.fail(node, str(exc)) from exc
        return [Info(x.dtype, x.shape[:axis] + (s,) + x.shape[axis + 1:]) for s in sizes]
