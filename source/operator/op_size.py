"""Size: the number of elements of a tensor as an int64 scalar."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._shape import INT64, product
from nnhal.operator.base import Info, Prototype


class Size(Prototype):
    op_type = "Size"
    versions = (1, 13, 19, 21, 23, 24, 25)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        total = None if x.shape is None else product(x.shape)
        if total is None:
            return [Info(INT64, ())]
        return [Info.of(np.array(total, dtype=np.int64))]
