"""Shared CPU helpers of the shape and indexing kernels: safe stores, views, index normalization."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.base import Info


def put(result: np.ndarray, out: np.ndarray | None, dtype: np.dtype | None = None) -> np.ndarray:
    """Store ``result`` (which may alias an input) into ``out``, or return a fresh copy of it."""
    if out is not None:
        np.copyto(out, result, casting="unsafe")
        return out
    return np.array(result, dtype=dtype, copy=True)


def wrap_indices(indices: np.ndarray, dim: int | np.ndarray) -> np.ndarray:
    """Indices as int64 with negative ones counted from the end; IndexError when out of range."""
    idx = np.asarray(indices).astype(np.int64, copy=False)
    bad = (idx < -dim) | (idx >= dim)
    if np.any(bad):
        raise IndexError(f"index {int(idx[bad].reshape(-1)[0])} is out of range for a dimension of size {dim}")
    return np.where(idx < 0, idx + dim, idx)


def ints(array: np.ndarray | None) -> list[int] | None:
    """A small integer tensor (shape, axes, pads) as a list of Python ints."""
    if array is None:
        return None
    return [int(v) for v in np.asarray(array).reshape(-1)]


class ViewKernel(Kernel):
    """A kernel whose output is input 0 with a new shape (Reshape, Flatten, Squeeze, Unsqueeze)."""

    view = {0: 0}

    def target(self, node: Node, inputs: list) -> tuple[int, ...]:
        raise NotImplementedError(f"{type(self).__name__}.target")

    def prepare(self, node: Node, ins: list[Info | None], outs: list[Info]) -> RunFn:
        target: Callable[[Node, list], tuple[int, ...]] = self.target
        # NOTE: the planner extends the input's lifetime only for outputs with a
        # static shape; a dynamically shaped result is copied so it never aliases
        # an arena buffer that may be reused.
        copy = not outs[0].static
        if not copy and outs[0].dtype is not None:
            # NOTE: a static output's shape is known now: 0.5 us a run instead of 5 us re-deriving it from the
            # shape input (Swin-T runs 144 Reshapes)
            shape = tuple(outs[0].shape)

            def run_static(inputs: list, outputs: list) -> tuple[np.ndarray]:
                return (inputs[0].reshape(shape),)

            return run_static

        def run(inputs: list, outputs: list) -> tuple[np.ndarray]:
            y = inputs[0].reshape(target(node, inputs))
            return (y.copy() if copy else y,)

        return run


def axis_index(indices: np.ndarray, axis: int, dim: int) -> tuple:
    """An advanced index addressing, per element of ``indices``, its position with ``axis`` replaced."""
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = wrap_indices(indices, dim)
    return tuple(grid)


def scatter(out: np.ndarray, index: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    """Write ``updates`` into ``out`` at ``index``, or reduce them into it (add/mul/max/min)."""
    if reduction == "none":
        out[index] = updates
        return out
    ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
    ufunc.at(out, index, updates)
    return out


def copy_of(data: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``data`` copied into ``out`` (a no-op when the planner made them share a buffer), or a new copy."""
    if out is None:
        return data.copy()
    np.copyto(out, data)
    return out


def put_as(result: np.ndarray, out: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    """Store ``result`` with its elements in C order as an array of ``shape`` (into ``out`` if given)."""
    if out is None:
        return np.array(result, copy=True).reshape(shape)
    np.copyto(out.reshape(result.shape), result, casting="unsafe")
    return out


def zero_of(dtype: np.dtype) -> np.ndarray:
    """The zero of a dtype as a 0-d array; the empty string for string tensors."""
    return np.array("", dtype=object) if np.dtype(dtype).kind == "O" else np.zeros((), dtype=dtype)
