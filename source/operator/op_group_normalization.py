"""GroupNormalization: normalize each group of channels; per-group (18) or per-channel (21) affine."""
from __future__ import annotations

from typing import Any

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._nn import same_float, stash_dtype
from nnhal.operator.base import REQUIRED, Info, Prototype


class GroupNormalization(Prototype):
    op_type = "GroupNormalization"
    versions = (18, 21)
    inputs = (3, 3)
    attributes = {"epsilon": 1e-5, "num_groups": REQUIRED, "stash_type": 1}

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"epsilon": 1e-5, "num_groups": REQUIRED} if version == 18 else self.attributes

    def check(self, node: Node) -> None:
        if node.attrs["num_groups"] < 1:
            raise ModelError(f"{where(node)}: num_groups must be >= 1")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        stash_dtype(self, node)
        x = ins[0]
        groups = node.attrs["num_groups"]
        if x.shape is not None and x.shape[1] is not None and x.shape[1] % groups:
            raise self.fail(node, f"{x.shape[1]} channels do not split into {groups} groups")
        return same_float(self, node, ins)
