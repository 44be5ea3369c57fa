"""Softsign on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._unary import FormulaKernel


class SoftsignKernel(FormulaKernel):
    op_type = "Softsign"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        d = np.abs(x)
        d += 1
        return np.divide(x, d, out=d)


IMPLEMENTATIONS = (SoftsignKernel,)
