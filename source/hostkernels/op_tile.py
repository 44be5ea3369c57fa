"""Tile on the CPU: numpy tile."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._shape import ints
from nnhal.hostkernels.base import FunctionKernel
from nnhal.operator.op_tile import repeats_of


class TileKernel(FunctionKernel):
    op_type = "Tile"

    def compute(self, node: Node, x: np.ndarray, *rest: np.ndarray) -> np.ndarray:
        reps = repeats_of(node, x.ndim, [None] + [ints(r) for r in rest])
        return np.tile(x, reps) if x.ndim else x.copy()


IMPLEMENTATIONS = (TileKernel,)
