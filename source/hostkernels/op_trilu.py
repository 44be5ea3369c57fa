"""Trilu on the CPU: numpy triu / tril over the last two dims."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._shape import zero_of
from nnhal.hostkernels.base import FunctionKernel


class TriluKernel(FunctionKernel):
    op_type = "Trilu"

    def compute(self, node: Node, x: np.ndarray, k: np.ndarray | None = None) -> np.ndarray:
        offset = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
        n, m = x.shape[-2:]
        keep = np.tri(n, m, offset - 1, dtype=bool) if node.attrs["upper"] else np.tri(n, m, offset, dtype=bool)
        if node.attrs["upper"]:
            keep = ~keep
        return np.where(keep, x, zero_of(x.dtype))


IMPLEMENTATIONS = (TriluKernel,)
