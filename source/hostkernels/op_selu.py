"""Selu on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._unary import FormulaKernel


class SeluKernel(FormulaKernel):
    op_type = "Selu"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        alpha, gamma = node.attrs["alpha"], node.attrs["gamma"]
        return np.where(x > 0, x * gamma, np.expm1(x) * (alpha * gamma))


IMPLEMENTATIONS = (SeluKernel,)
