"""GatherND: gather slices of ``data`` addressed by index tuples (the last dim of ``indices``)."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


class GatherND(Prototype):
    op_type = "GatherND"
    versions = (11, 12, 13)
    inputs = (2, 2)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"batch_dims": 0} if version >= 12 else {}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        data, indices = ins
        b = node.attrs.get("batch_dims", 0)
        if data.shape is None or indices.shape is None or indices.shape[-1:] == (None,):
            return [Info(data.dtype, None)]
        if not indices.shape:
            raise self.fail(node, "indices must have rank >= 1")
        k = indices.shape[-1]
        if b < 0 or b >= min(len(data.shape), len(indices.shape)) or b + k > len(data.shape):
            raise self.fail(node, f"batch_dims {b} and index depth {k} do not fit data rank {len(data.shape)} "
                                  f"and indices rank {len(indices.shape)}")
        if any(x is not None and y is not None and x != y for x, y in zip(data.shape[:b], indices.shape[:b])):
            raise self.fail(node, f"the {b} batch dims of data {data.shape} and indices {indices.shape} differ")
        return [Info(data.dtype, indices.shape[:-1] + data.shape[b + k:])]
