"""Pow on the CPU: numpy power for one float dtype; exact integer powers; mixed dtypes cast to the base's."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._binary import BinaryFn, BinaryKernel, power
from nnhal.operator.base import Info


class PowKernel(BinaryKernel):
    op_type = "Pow"

    def function(self, node: Node, ins: list[Info | None], outs: list[Info]) -> BinaryFn:
        a, b = ins
        if a.dtype is not None and a.dtype == b.dtype and a.dtype.kind == "f":
            return np.power
        return power


IMPLEMENTATIONS = (PowKernel,)
