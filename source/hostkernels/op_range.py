"""Range on the CPU: start + i * delta, computed wide and cast to the input type."""
from __future__ import annotations

import numpy as np

from nnhal.graph.dtypes import to_numpy
from nnhal.graph.node import Node
from nnhal.hostkernels.base import FunctionKernel
from nnhal.operator.op_range import range_count


def compute_dtype(node: Node, dtype: np.dtype) -> np.dtype:
    """The type start + i * delta is computed in: int64, float64, or the stash type for float16."""
    if dtype.kind in "iu":
        return np.dtype(np.int64)
    if dtype == np.float16:
        return to_numpy(node.attrs.get("stash_type", 1)) or np.dtype(np.float32)
    return np.dtype(np.float64)


class RangeKernel(FunctionKernel):
    op_type = "Range"

    def compute(self, node: Node, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
        wide = compute_dtype(node, start.dtype)
        first, last, step = (np.asarray(v).astype(wide).reshape(-1)[0].item() for v in (start, limit, delta))
        n = range_count(first, last, step)
        values = np.arange(n, dtype=wide) * np.asarray(step, dtype=wide) + np.asarray(first, dtype=wide)
        return values.astype(start.dtype)


IMPLEMENTATIONS = (RangeKernel,)
