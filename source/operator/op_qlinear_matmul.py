"""QLinearMatMul: quantized matrix product requantized to the output scale and zero point."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._qrc import EIGHT_BIT, check_quant_dtype, matmul_shape, per_tensor_or_axis
from nnhal.operator.base import Info, Prototype


class QLinearMatMul(Prototype):
    op_type = "QLinearMatMul"
    versions = (10, 21)
    inputs = (8, 8)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        a, b, y_zero = ins[0], ins[3], ins[7]
        check_quant_dtype(node, a.dtype, "a", EIGHT_BIT)
        check_quant_dtype(node, b.dtype, "b", EIGHT_BIT)
        check_quant_dtype(node, y_zero.dtype, "y_zero_point", EIGHT_BIT)
        for i in (1, 4, 6):
            if ins[i].dtype is not None and ins[i].dtype.kind != "f":
                raise self.fail(node, f"scale input {i} must be float, got {ins[i].dtype}")
        rows = None if a.shape is None or len(a.shape) < 2 else a.shape[-2]
        cols = None if b.shape is None or len(b.shape) < 2 else b.shape[-1]
        for i, what, length in ((1, "a_scale", rows), (2, "a_zero_point", rows), (4, "b_scale", cols),
                                (5, "b_zero_point", cols), (6, "y_scale", 1), (7, "y_zero_point", 1)):
            per_tensor_or_axis(self, node, ins[i], what, length)
        return [Info(y_zero.dtype, matmul_shape(node, a.shape, b.shape))]

