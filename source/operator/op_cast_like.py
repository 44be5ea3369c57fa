"""CastLike: convert the elements of input 0 to the element type of input 1."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


class CastLike(Prototype):
    op_type = "CastLike"
    versions = (15, 19, 21, 23, 24, 25)
    inputs = (2, 2)

    def attributes_for(self, version: int) -> dict[str, Any]:
        # NOTE: saturate and round_mode only affect float8 targets, which nnhal does not run.
        if version >= 24:
            return {"saturate": 1, "round_mode": "up"}
        if version >= 19:
            return {"saturate": 1}
        return {}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        return [Info(ins[1].dtype, ins[0].shape)]
