"""ScatterElements: a copy of ``data`` with ``updates`` written (or reduced) at per-element indices."""
from __future__ import annotations

from typing import Any

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, expect_shape, normalize_axis, same_as

REDUCTIONS = {16: ("none", "add", "mul"), 18: ("none", "add", "mul", "max", "min")}


def check_reduction(node: Node) -> None:
    """ModelError unless the reduction attribute is one the node's version defines."""
    allowed = REDUCTIONS[18] if node.version >= 18 else REDUCTIONS[16]
    if node.attrs.get("reduction", "none") not in allowed:
        raise ModelError(f"{where(node)}: reduction '{node.attrs['reduction']}' is not one of {allowed}")


class ScatterElements(Prototype):
    op_type = "ScatterElements"
    versions = (11, 13, 16, 18)
    inputs = (3, 3)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"axis": 0, "reduction": "none"} if version >= 16 else {"axis": 0}

    def check(self, node: Node) -> None:
        check_reduction(node)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        data, indices, updates = ins
        if data.dtype is not None and updates.dtype is not None and data.dtype != updates.dtype:
            raise self.fail(node, f"data dtype {data.dtype} differs from updates dtype {updates.dtype}")
        if data.rank is not None:
            normalize_axis(node, node.attrs["axis"], data.rank)
            for other in (indices, updates):
                if other.rank is not None and other.rank != data.rank:
                    raise self.fail(node, "data, indices and updates must have the same rank")
        expect_shape(node, updates, indices.shape, "updates (the shape of indices)")
        return [same_as(data)]
