"""HardSwish on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels import _blocks
from nnhal.hostkernels._unary import FormulaKernel, GateKernel


class HardSwishKernel(FormulaKernel):
    op_type = "HardSwish"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        y = x * (1.0 / 6.0)
        y += 0.5
        np.clip(y, 0, 1, out=y)
        y *= x
        return y


class FastHardSwishKernel(GateKernel):
    op_type = "HardSwish"

    def gate(self, node: Node):
        return _blocks.hardswish_


IMPLEMENTATIONS = (HardSwishKernel, FastHardSwishKernel)
