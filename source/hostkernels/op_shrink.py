"""Shrink on the CPU (integer inputs are shifted in float64, then truncated back)."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._unary import FormulaKernel


class ShrinkKernel(FormulaKernel):
    op_type = "Shrink"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        lambd, bias = node.attrs["lambd"], node.attrs["bias"]
        zero = np.zeros((), x.dtype)
        return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, zero))


IMPLEMENTATIONS = (ShrinkKernel,)
