"""GatherElements: per-element gather along an axis; the output has the indices' shape."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, normalize_axis


class GatherElements(Prototype):
    op_type = "GatherElements"
    versions = (11, 13)
    inputs = (2, 2)
    attributes = {"axis": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        data, indices = ins
        if data.rank is not None and indices.rank is not None:
            if data.rank != indices.rank:
                raise self.fail(node, f"data rank {data.rank} differs from indices rank {indices.rank}")
            axis = normalize_axis(node, node.attrs["axis"], data.rank)
            for i, (d, k) in enumerate(zip(data.shape, indices.shape)):
                if i != axis and d is not None and k is not None and k > d:
                    raise self.fail(node, f"indices shape {indices.shape} exceeds data shape {data.shape} on axis {i}")
        return [Info(data.dtype, indices.shape)]
