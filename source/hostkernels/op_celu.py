"""Celu on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._unary import FormulaKernel


class CeluKernel(FormulaKernel):
    op_type = "Celu"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        alpha = node.attrs["alpha"]
        return np.maximum(x, 0) + np.minimum(np.expm1(x / alpha) * alpha, 0)


IMPLEMENTATIONS = (CeluKernel,)
