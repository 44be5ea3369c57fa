"""TopK on the CPU: a stable sort along the axis, so equal values keep the lower index first."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


def top_k(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """Values and int64 indices of the k largest (or smallest) entries along ``axis``."""
    n = x.shape[axis]
    if largest:
        # NOTE: sorting the reversed axis ascending and reading it backwards gives a
        # descending order in which equal values keep their original (lower index first) order.
        order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        order = (n - 1) - np.flip(order, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    index = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, index, axis=axis), index


class TopKKernel(Kernel):
    op_type = "TopK"

    def prepare(self, node, ins, outs) -> RunFn:
        largest = bool(node.attrs.get("largest", 1))

        def run(inputs, outputs):
            x = inputs[0]
            k = node.attrs["k"] if node.version < 10 else int(np.asarray(inputs[1]).reshape(-1)[0])
            axis = node.attrs["axis"] % x.ndim
            if not 0 <= k <= x.shape[axis]:
                raise ValueError(f"k = {k} is out of range for an axis of size {x.shape[axis]}")
            return top_k(x, k, axis, largest)

        return run


IMPLEMENTATIONS = (TopKKernel,)
