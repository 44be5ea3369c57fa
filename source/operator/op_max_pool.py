"""MaxPool: windowed maximum with optional int64 Indices output."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._nn import POOL_ATTRIBUTES, PoolPrototype
from nnhal.operator.base import REQUIRED, Info


class MaxPool(PoolPrototype):
    op_type = "MaxPool"
    versions = (1, 8, 10, 11, 12, 22)
    outputs = (1, 2)
    attributes = {**POOL_ATTRIBUTES, "kernel_shape": REQUIRED, "storage_order": 0, "ceil_mode": 0,
                  "dilations": None}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        shape = self.spatial_out(node, x)
        return [Info(x.dtype, shape), Info(np.dtype(np.int64), shape)]
