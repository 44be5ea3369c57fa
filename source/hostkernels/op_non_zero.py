"""NonZero on the CPU: numpy nonzero stacked as int64 rows."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.base import FunctionKernel


class NonZeroKernel(FunctionKernel):
    op_type = "NonZero"

    def compute(self, node: Node, x: np.ndarray) -> np.ndarray:
        if x.ndim == 0:
            return np.zeros((0, int(bool(x))), dtype=np.int64)
        return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


IMPLEMENTATIONS = (NonZeroKernel,)
