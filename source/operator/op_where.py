"""Where: elementwise X where the condition holds, else Y, with multidirectional broadcasting."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._binary import common_dtype
from nnhal.operator.base import Info, Prototype, broadcast


class Where(Prototype):
    op_type = "Where"
    versions = (9, 16)
    inputs = (3, 3)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        cond, x, y = ins
        if cond.dtype is not None and cond.dtype != np.bool_:
            raise self.fail(node, f"the condition has dtype {cond.dtype}; it must be bool")
        dtype = common_dtype(node, self, [x, y])
        return [Info(dtype, broadcast(node, cond.shape, x.shape, y.shape))]
