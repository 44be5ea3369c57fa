"""Col2Im: sum sliding-window columns back into an image."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


class Col2Im(Prototype):
    op_type = "Col2Im"
    versions = (18,)
    inputs = (3, 3)
    attributes = {"dilations": None, "pads": None, "strides": None}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, image, block = ins
        if image.value is None or block.value is None or x.shape is None:
            rank = None if image.shape is None or image.shape[0] is None else image.shape[0] + 2
            shape = None if rank is None else (None if x.shape is None else x.shape[0],) + (None,) * (rank - 1)
            return [Info(x.dtype, shape)]
        blocks = int(np.prod(block.value))
        c = x.shape[1]
        if c is not None and c % blocks:
            raise self.fail(node, f"{c} column channels do not split into blocks of {blocks}")
        return [Info(x.dtype, (x.shape[0], None if c is None else c // blocks,
                               *(int(v) for v in image.value.reshape(-1))))]
