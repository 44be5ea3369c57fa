"""MatMulInteger: int32 matrix product of zero-point-shifted 8-bit integers."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._qrc import EIGHT_BIT, check_quant_dtype, matmul_shape, per_tensor_or_axis
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
        rows = None if a.shape is None or len(a.shape) < 2 else a.shape[-2]
        cols = None if b.shape is None or len(b.shape) < 2 else b.shape[-1]
        for i, what, length in ((2, "a_zero_point", rows), (3, "b_zero_point", cols)):
            # NOTE: an N-D zero point ([D1, D2, M, 1]) is per row too; only a vector's length is checked here
            if len(ins) > i and ins[i] is not None and ins[i].shape is not None and len(ins[i].shape) <= 1:
                per_tensor_or_axis(self, node, ins[i], what, length)
        return [Info(np.dtype(np.int32), matmul_shape(node, a.shape, b.shape))]
