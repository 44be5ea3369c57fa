"""Concat: join tensors along an axis."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator.base import REQUIRED, Info, Prototype, normalize_axis


class Concat(Prototype):
    op_type = "Concat"
    versions = (1, 4, 11, 13)
    inputs = (1, -1)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"axis": 1} if version < 4 else {"axis": REQUIRED}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        parts = [i for i in ins if i is not None]
        dtypes = {p.dtype for p in parts if p.dtype is not None}
        if len(dtypes) > 1:
            raise self.fail(node, f"inputs have different dtypes {sorted(map(str, dtypes))}")
        dtype = dtypes.pop() if dtypes else None
        ranks = {p.rank for p in parts if p.rank is not None}
        if len(ranks) > 1:
            raise self.fail(node, f"inputs have different ranks {sorted(ranks)}")
        if not ranks:
            return [Info(dtype, None)]
        rank = ranks.pop()
        axis = normalize_axis(node, node.attrs["axis"], rank)
        dims: list[int | None] = []
        for i in range(rank):
            known = [p.shape[i] for p in parts if p.shape is not None]
            if i == axis:
                full = len(known) == len(parts) and all(d is not None for d in known)
                dims.append(sum(known) if full else None)
                continue
            sizes = {d for d in known if d is not None}
            if len(sizes) > 1:
                raise self.fail(node, f"inputs differ in dim {i}: {sorted(sizes)}")
            dims.append(sizes.pop() if sizes else None)
        return [Info(dtype, tuple(dims))]
