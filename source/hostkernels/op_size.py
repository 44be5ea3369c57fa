"""Size on the CPU: the input's element count as an int64 scalar."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.base import FunctionKernel


class SizeKernel(FunctionKernel):
    op_type = "Size"

    def compute(self, node: Node, x: np.ndarray) -> np.ndarray:
        return np.array(x.size, dtype=np.int64)


IMPLEMENTATIONS = (SizeKernel,)
