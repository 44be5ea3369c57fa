"""DepthToSpace: move blocks of channels into spatial blocks (DCR or CRD order)."""
from __future__ import annotations

from typing import Any

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator.base import REQUIRED, Info, Prototype


def check_block(node: Node) -> None:
    """ModelError for a non-positive blocksize or an unknown mode."""
    if node.attrs["blocksize"] < 1:
        raise ModelError(f"{where(node)}: blocksize must be positive, got {node.attrs['blocksize']}")
    if node.attrs.get("mode", "DCR") not in ("DCR", "CRD"):
        raise ModelError(f"{where(node)}: mode '{node.attrs['mode']}' is not DCR or CRD")


class DepthToSpace(Prototype):
    op_type = "DepthToSpace"
    versions = (1, 11, 13, 28)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"blocksize": REQUIRED, "mode": "DCR"} if version >= 11 else {"blocksize": REQUIRED}

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
        if c is not None and c % (b * b):
            raise self.fail(node, f"{c} channels are not divisible by blocksize^2 = {b * b}")
        return [Info(x.dtype, (n, None if c is None else c // (b * b),
                               None if h is None else h * b, None if w is None else w * b))]
