"""HardSigmoid on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels import _blocks
from nnhal.hostkernels._unary import FormulaKernel, GateKernel


class HardSigmoidKernel(FormulaKernel):
    op_type = "HardSigmoid"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        y = x * node.attrs["alpha"]
        y += node.attrs["beta"]
        return np.clip(y, 0, 1, out=y)


class FastHardSigmoidKernel(GateKernel):
    op_type = "HardSigmoid"

    def gate(self, node: Node):
        alpha, beta = float(node.attrs["alpha"]), float(node.attrs["beta"])
        return lambda y: _blocks.hardsigmoid_(y, alpha, beta)


IMPLEMENTATIONS = (HardSigmoidKernel, FastHardSigmoidKernel)
