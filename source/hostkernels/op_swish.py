"""Swish on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import FormulaKernel, sigmoid
from nnhal.graph.node import Node


class SwishKernel(FormulaKernel):
    op_type = "Swish"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        return x * sigmoid(x * node.attrs["alpha"])


IMPLEMENTATIONS = (SwishKernel,)
