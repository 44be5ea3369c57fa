"""SpaceToDepth: move spatial blocks into channels (DCR, or CRD from opset 28)."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator.base import REQUIRED, Info, Prototype
from nnhal.operator.op_depth_to_space import check_block


class SpaceToDepth(Prototype):
    op_type = "SpaceToDepth"
    versions = (1, 13, 28)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"blocksize": REQUIRED, "mode": "DCR"} if version >= 28 else {"blocksize": REQUIRED}

    def check(self, node: Node) -> None:
        check_block(node)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is None:
            return [Info(x.dtype, (None,) * 4)]
        if len(x.shape) != 4:
            raise self.fail(node, f"input must have rank 4, it has rank {len(x.shape)}")
        n, c, h, w = x.shape
        b = node.attrs["blocksize"]
        for d in (h, w):
            if d is not None and d % b:
                raise self.fail(node, f"spatial dims {(h, w)} are not divisible by blocksize {b}")
        return [Info(x.dtype, (n, None if c is None else c * b * b,
                               None if h is None else h // b, None if w is None else w // b))]
