"""Sigmoid on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels import _blocks
from nnhal.hostkernels._unary import FormulaKernel, GateKernel, sigmoid


class SigmoidKernel(FormulaKernel):
    op_type = "Sigmoid"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        return sigmoid(x)


class FastSigmoidKernel(GateKernel):
    op_type = "Sigmoid"

    def gate(self, node: Node):
        return _blocks.sigmoid_


IMPLEMENTATIONS = (SigmoidKernel, FastSigmoidKernel)
