"""Swish on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels import _blocks
from nnhal.hostkernels._unary import FormulaKernel, GateKernel, sigmoid


class SwishKernel(FormulaKernel):
    op_type = "Swish"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        return x * sigmoid(x * node.attrs["alpha"])


class FastSwishKernel(GateKernel):
    op_type = "Swish"

    def gate(self, node: Node):
        return _blocks.silu_ if float(node.attrs.get("alpha", 1.0)) == 1.0 else None


IMPLEMENTATIONS = (SwishKernel, FastSwishKernel)
