"""QGemm (com.microsoft): alpha * A' B' + C on quantized A and B, int32 C; quantized or float Y."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


class QGemm(Prototype):
    op_type = "QGemm"
    domain = "com.microsoft"
    versions = (1,)
    inputs = (6, 9)
    attributes = {"alpha": 1.0, "transA": 0, "transB": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        a, b = ins[0], ins[3]
        y_zero = ins[8] if len(ins) > 8 else None
        dtype = y_zero.dtype if y_zero is not None else (np.dtype(np.float32) if len(ins) < 8 or ins[7] is None
                                                        else a.dtype)
        if a.shape is None or b.shape is None:
            return [Info(dtype, None)]
        m = a.shape[1] if node.attrs["transA"] else a.shape[0]
        n = b.shape[0] if node.attrs["transB"] else b.shape[1]
        return [Info(dtype, (m, n))]
