"""Shape on the CPU: the input's dims as int64."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.base import FunctionKernel
from nnhal.operator.op_shape import shape_range


class ShapeKernel(FunctionKernel):
    op_type = "Shape"

    def compute(self, node: Node, x: np.ndarray) -> np.ndarray:
        start, end = shape_range(node, x.ndim)
        return np.array(x.shape[start:end] if end > start else (), dtype=np.int64)


IMPLEMENTATIONS = (ShapeKernel,)
