"""TopK on the CPU: a stable sort along the axis, so equal values keep the lower index first."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


def top_k(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """Values and int64 indices of the k largest (or smallest) entries along ``axis``."""
    n = x.shape[axis]
    if 0 < k and 4 * k <= n and x.dtype.kind in "fiu" and x.size and not (x.dtype.kind == "f" and np.isnan(x).any()):
        return _partial(x, k, axis, largest)
    if largest:
        # NOTE: sorting the reversed axis ascending and reading it backwards gives a
        # descending order in which equal values keep their original (lower index first) order.
        order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        order = (n - 1) - np.flip(order, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    index = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, index, axis=axis), index


def _partial(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """top_k for k much smaller than the axis: a partition finds the k-th value, then only the entries
    beating it, and the lowest-indexed ones equal to it, are sorted (NaN-free input)."""
    moved = np.moveaxis(x, axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    n = rows.shape[1]
    kth = np.partition(rows, n - k if largest else k - 1, axis=1)[:, n - k if largest else k - 1][:, None]
    better = rows > kth if largest else rows < kth
    equal = rows == kth
    need = k - better.sum(axis=1, keepdims=True)
    chosen = better | (equal & (np.cumsum(equal, axis=1) <= need))
    index = np.nonzero(chosen)[1].reshape(rows.shape[0], k)    # k per row, ascending index
    values = np.take_along_axis(rows, index, axis=1)
    # NOTE: a stable sort of index-ordered candidates keeps the lower index first among equal values.
    order = np.argsort(_descending_key(values) if largest else values, axis=1, kind="stable")
    index = np.take_along_axis(index, order, axis=1)
    values = np.take_along_axis(values, order, axis=1)
    shape = moved.shape[:-1] + (k,)
    return (np.moveaxis(values.reshape(shape), -1, axis),
            np.moveaxis(index.reshape(shape).astype(np.int64), -1, axis))


def _descending_key(values: np.ndarray) -> np.ndarray:
    """An ascending sort key for descending order: negation for floats; for integers, without overflow
    (-INT_MIN wraps)."""
    if values.dtype.kind == "f":
        return -values
    return np.iinfo(values.dtype).max - values if values.dtype.kind == "u" else ~values


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
