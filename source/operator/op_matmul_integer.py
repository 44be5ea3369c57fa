"""MatMulInteger: int32 matrix product of zero-point-shifted 8-bit integers."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._qrc import EIGHT_BIT, check_quant_dtype, matmul_shape
from nnhal.operator.base import Info, Prototype


class MatMulInteger(Prototype):
    op_type = "MatMulInteger"
    versions = (10,)
    inputs = (2, 4)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        a, b = ins[0], ins[1]
        check_quant_dtype(node, a.dtype, "A", EIGHT_BIT)
        check_quant_dtype(node, b.dtype, "B", EIGHT_BIT)
        for i, ref in ((2, a), (3, b)):
            zp = ins[i] if len(ins) > i else None
            if zp is not None and zp.dtype is not None and ref.dtype is not None and zp.dtype != ref.dtype:
                raise self.fail(node, f"zero point {i} has type {zp.dtype}; its input has {ref.dtype}")
        return [Info(np.dtype(np.int32), matmul_shape(node, a.shape, b.shape))]
