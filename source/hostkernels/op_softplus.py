"""Softplus on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._unary import FormulaKernel, softplus


class SoftplusKernel(FormulaKernel):
    op_type = "Softplus"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        return softplus(x)


IMPLEMENTATIONS = (SoftplusKernel,)
