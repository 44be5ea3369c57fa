"""Mish on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._unary import FormulaKernel, softplus


class MishKernel(FormulaKernel):
    op_type = "Mish"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        return x * np.tanh(softplus(x))


IMPLEMENTATIONS = (MishKernel,)
