"""Div on the CPU: numpy divide for floats, truncating integer division for integers."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._binary import BinaryFn, BinaryKernel, trunc_divide
from nnhal.operator.base import Info


class DivKernel(BinaryKernel):
    op_type = "Div"

    def function(self, node: Node, ins: list[Info | None], outs: list[Info]) -> BinaryFn:
        dtype = outs[0].dtype
        return np.divide if dtype is not None and dtype.kind == "f" else divide


def divide(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Div of arrays whose dtype was unknown at prepare time."""
    if np.asarray(a).dtype.kind == "f":
        return np.divide(a, b, out=out)
    return trunc_divide(np.asarray(a), np.asarray(b), out)


IMPLEMENTATIONS = (DivKernel,)
