"""Shared inference aids of the shape and indexing operators (Reshape, Slice, Pad, ...)."""
from __future__ import annotations

import numpy as np

from nnhal.errors import ShapeError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info

INT64 = np.dtype(np.int64)


def present(ins: list[Info | None], i: int) -> Info | None:
    """Input ``i`` or None when it is absent (or beyond the node's inputs)."""
    return ins[i] if i < len(ins) else None


def const_ints(info: Info | None) -> list[int] | None:
    """The value of a constant integer tensor as a flat list of ints, else None."""
    if info is None or info.value is None:
        return None
    return [int(v) for v in np.asarray(info.value).reshape(-1)]


def length_of(info: Info | None) -> int | None:
    """Number of elements of a 1-D (or scalar) tensor when its shape says it."""
    if info is None or info.shape is None:
        return None
    if len(info.shape) == 0:
        return 1
    return info.shape[0] if len(info.shape) == 1 else None


def norm_axes(node: Node, axes: list[int], rank: int, unique: bool = True) -> list[int]:
    """Axes mapped into [0, rank); ShapeError when out of range or repeated."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ShapeError(f"{where(node)}: axis {a} is out of range for rank {rank}")
        out.append(a + rank if a < 0 else a)
    if unique and len(set(out)) != len(out):
        raise ShapeError(f"{where(node)}: axes {axes} repeat an axis")
    return out


def product(dims: list | tuple) -> int | None:
    """Product of dims, None if any is unknown."""
    total = 1
    for d in dims:
        if d is None:
            return None
        total *= int(d)
    return total


def unknown(dtype: np.dtype | None, rank: int | None) -> Info:
    """An output of known dtype whose dims (or rank, when None) are unknown."""
    return Info(dtype, None if rank is None else (None,) * rank)


def slice_params(start: int, end: int, step: int, dim: int) -> tuple[int, int, int]:
    """ONNX Slice clamping for one axis: (start, stop, count); stop may be -1 for negative steps."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        count = max(0, -(-(end - start) // step))
    else:
        start = min(max(start, 0), dim - 1)
        end = min(max(end, -1), dim - 1)
        count = max(0, -(-(start - end) // -step))
    return start, end, count


def to_slice(start: int, end: int, step: int) -> slice:
    """A Python slice for clamped Slice parameters (stop -1 of a negative step means 'through 0')."""
    return slice(start, None if end < 0 else end, step)
