"""Reshape on the CPU: a view of the input."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._shape import ViewKernel, ints
from nnhal.operator.op_reshape import target_shape


class ReshapeView(ViewKernel):
    op_type = "Reshape"

    def target(self, node: Node, inputs: list) -> tuple[int, ...]:
        x: np.ndarray = inputs[0]
        shape = list(node.attrs["shape"] or []) if node.version < 5 else ints(inputs[1])
        return target_shape(node, x.shape, shape)


IMPLEMENTATIONS = (ReshapeView,)
