"""AffineGrid: the sampling grid of an affine transform for GridSample."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


class AffineGrid(Prototype):
    op_type = "AffineGrid"
    versions = (20,)
    inputs = (2, 2)
    attributes = {"align_corners": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        theta, size = ins
        if size.value is not None:
            dims = [int(v) for v in size.value.reshape(-1)]
            if len(dims) not in (4, 5):
                raise self.fail(node, f"size {dims} must have 4 or 5 values")
            return [Info(theta.dtype, (dims[0], *dims[2:], len(dims) - 2))]
        if size.shape is not None and size.shape[0] is not None:
            r = size.shape[0] - 2
            return [Info(theta.dtype, (None,) * (r + 1) + (r,))]
        return [Info(theta.dtype, None)]
