"""LeakyRelu on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._unary import FormulaKernel


class LeakyReluKernel(FormulaKernel):
    op_type = "LeakyRelu"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        return np.where(x < 0, x * node.attrs["alpha"], x)


IMPLEMENTATIONS = (LeakyReluKernel,)
