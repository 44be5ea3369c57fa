"""Mod on the CPU: numpy mod (sign of the divisor) or fmod (sign of the dividend)."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._binary import BinaryFn, BinaryKernel
from nnhal.operator.base import Info


class ModKernel(BinaryKernel):
    op_type = "Mod"

    def function(self, node: Node, ins: list[Info | None], outs: list[Info]) -> BinaryFn:
        return np.fmod if node.attrs["fmod"] else np.mod


IMPLEMENTATIONS = (ModKernel,)
