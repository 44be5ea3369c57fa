"""Erf on the CPU: computed in float64 (see _unary.erf), stored in the input dtype."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels._unary import FormulaKernel, erf
from nnhal.graph.node import Node


class ErfKernel(FormulaKernel):
    op_type = "Erf"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        return erf(x)


IMPLEMENTATIONS = (ErfKernel,)
