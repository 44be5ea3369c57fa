"""OneHot on the CPU: compare indices with a depth ramp, then select on/off values."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.base import FunctionKernel
from nnhal.operator.op_one_hot import depth_of, one_hot_axis


class OneHotKernel(FunctionKernel):
    op_type = "OneHot"

    def compute(self, node: Node, indices: np.ndarray, depth: np.ndarray, values: np.ndarray) -> np.ndarray:
        size = depth_of(depth)
        idx = np.asarray(indices).astype(np.int64)
        if node.version >= 11:
            idx = np.where(idx < 0, idx + size, idx)
        axis = one_hot_axis(node, idx.ndim)
        ramp = np.arange(size, dtype=np.int64).reshape((size,) + (1,) * (idx.ndim - axis))
        hot = np.expand_dims(idx, axis) == ramp
        flat = values.reshape(-1)
        return np.where(hot, flat[1], flat[0])


IMPLEMENTATIONS = (OneHotKernel,)
