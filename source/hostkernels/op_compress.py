"""Compress on the CPU: numpy compress."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.base import FunctionKernel


class CompressKernel(FunctionKernel):
    op_type = "Compress"

    def compute(self, node: Node, x: np.ndarray, condition: np.ndarray) -> np.ndarray:
        axis = node.attrs["axis"]
        cond = np.asarray(condition, dtype=bool).reshape(-1)
        if axis is None:
            return np.compress(cond, x.reshape(-1))
        return np.compress(cond, x, axis=axis % x.ndim)


IMPLEMENTATIONS = (CompressKernel,)
