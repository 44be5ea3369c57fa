"""Elu on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._unary import FormulaKernel


class EluKernel(FormulaKernel):
    op_type = "Elu"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        return np.where(x < 0, np.expm1(x) * node.attrs["alpha"], x)


IMPLEMENTATIONS = (EluKernel,)
