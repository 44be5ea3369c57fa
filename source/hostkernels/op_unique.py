"""Unique on the CPU: numpy unique, reordered by first occurrence when unsorted."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.base import FunctionKernel


def unique(x: np.ndarray, axis: int | None, ordered: bool) -> tuple[np.ndarray, ...]:
    """(Y, indices, inverse_indices, counts) as ONNX defines them."""
    if axis is None:
        y, first, inverse, counts = np.unique(x.reshape(-1), True, True, True)
    else:
        y, first, inverse, counts = np.unique(x, True, True, True, axis=axis)
    inverse = inverse.reshape(-1)
    if not ordered:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


class UniqueKernel(FunctionKernel):
    op_type = "Unique"

    def compute(self, node: Node, x: np.ndarray) -> tuple[np.ndarray, ...]:
        axis = node.attrs["axis"]
        axis = None if axis is None else axis % x.ndim
        return unique(x, axis, bool(node.attrs["sorted"]))[:len(node.outputs)]


IMPLEMENTATIONS = (UniqueKernel,)
