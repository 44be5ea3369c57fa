"""Gelu on the CPU: exact (erf in float64) or the tanh approximation."""
from __future__ import annotations

import math

import numpy as np

from nnhal.device.cpu.kernels._unary import FormulaKernel, erf
from nnhal.graph.node import Node

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class GeluKernel(FormulaKernel):
    op_type = "Gelu"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        if node.attrs["approximate"] == "tanh":
            inner = x * x
            inner *= 0.044715
            inner += 1
            inner *= x
            inner *= _SQRT_2_OVER_PI
            t = np.tanh(inner, out=inner)
        else:
            t = erf(x * (1.0 / math.sqrt(2.0)))
        t += 1
        t *= x
        t *= 0.5
        return t


IMPLEMENTATIONS = (GeluKernel,)
