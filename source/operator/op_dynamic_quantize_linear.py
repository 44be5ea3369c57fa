"""DynamicQuantizeLinear: uint8 quantization with scale and zero point computed from x."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


class DynamicQuantizeLinear(Prototype):
    op_type = "DynamicQuantizeLinear"
    versions = (11,)
    outputs = (3, 3)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.dtype is not None and x.dtype != np.float32:
            raise self.fail(node, f"x must be float32, got {x.dtype}")
        return [Info(np.dtype(np.uint8), x.shape), Info(np.dtype(np.float32), ()), Info(np.dtype(np.uint8), ())]
