"""ScatterND: a copy of ``data`` with slices addressed by index tuples replaced (or reduced)."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, same_as
from nnhal.operator.op_scatter_elements import check_reduction


class ScatterND(Prototype):
    op_type = "ScatterND"
    versions = (11, 13, 16, 18)
    inputs = (3, 3)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"reduction": "none"} if version >= 16 else {}

    def check(self, node: Node) -> None:
        check_reduction(node)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        data, indices, updates = ins
        if data.dtype is not None and updates.dtype is not None and data.dtype != updates.dtype:
            raise self.fail(node, f"data dtype {data.dtype} differs from updates dtype {updates.dtype}")
        if indices.shape is not None and not indices.shape:
            raise self.fail(node, "indices must have rank >= 1")
        if data.shape is not None and indices.shape is not None and updates.shape is not None \
                and indices.shape and indices.shape[-1] is not None:
            k = indices.shape[-1]
            want = indices.shape[:-1] + data.shape[k:]
            if k > len(data.shape) or len(updates.shape) != len(want) or any(
                    a is not None and b is not None and a != b for a, b in zip(updates.shape, want)):
                raise self.fail(node, f"updates shape {updates.shape} does not match {want}")
        return [same_as(data)]
