"""Flatten on the CPU: a 2-D view of the input."""
from __future__ import annotations

import math

from nnhal.graph.node import Node
from nnhal.hostkernels._shape import ViewKernel
from nnhal.operator.op_flatten import flatten_axis


class FlattenView(ViewKernel):
    op_type = "Flatten"

    def target(self, node: Node, inputs: list) -> tuple[int, ...]:
        shape = inputs[0].shape
        axis = flatten_axis(node, len(shape))
        return math.prod(shape[:axis]), math.prod(shape[axis:])


IMPLEMENTATIONS = (FlattenView,)
