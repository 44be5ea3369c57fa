"""GatherElements on the CPU: take_along_axis with negative indices wrapped."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._shape import axis_index
from nnhal.hostkernels.base import FunctionKernel


class GatherElementsKernel(FunctionKernel):
    op_type = "GatherElements"

    def compute(self, node: Node, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
        axis = node.attrs["axis"] % data.ndim
        return data[axis_index(indices, axis, data.shape[axis])]


IMPLEMENTATIONS = (GatherElementsKernel,)
