"""ThresholdedRelu on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._unary import FormulaKernel


class ThresholdedReluKernel(FormulaKernel):
    op_type = "ThresholdedRelu"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        return np.where(x > node.attrs["alpha"], x, np.zeros((), x.dtype))


IMPLEMENTATIONS = (ThresholdedReluKernel,)
