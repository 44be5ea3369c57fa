"""Compress: the slices along an axis (or elements of the flattened input) where condition is true."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, normalize_axis


class Compress(Prototype):
    op_type = "Compress"
    versions = (9, 11, 28)
    inputs = (2, 2)
    attributes = {"axis": None}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, cond = ins
        if cond.rank is not None and cond.rank != 1:
            raise self.fail(node, f"condition must be 1-D, it has rank {cond.rank}")
        # NOTE: the selected count is data-dependent unless the condition is a constant.
        count = None if cond.value is None else int(np.count_nonzero(cond.value))
        axis = node.attrs["axis"]
        if axis is None:
            size = None if not x.static else int(np.prod(x.shape, dtype=np.int64))
            if size is not None and cond.shape is not None and cond.shape[0] is not None and cond.shape[0] > size:
                raise self.fail(node, f"condition has {cond.shape[0]} values for {size} elements")
            return [Info(x.dtype, (count,))]
        if x.shape is None:
            return [Info(x.dtype, None)]
        if not x.shape:
            raise self.fail(node, "input is a scalar; it needs rank >= 1 with an axis")
        axis = normalize_axis(node, axis, len(x.shape))
        dim = x.shape[axis]
        if cond.shape is not None and cond.shape[0] is not None and dim is not None and cond.shape[0] > dim:
            raise self.fail(node, f"condition has {cond.shape[0]} values for an axis of {dim}")
        return [Info(x.dtype, x.shape[:axis] + (count,) + x.shape[axis + 1:])]
