"""QLinearMatMul: quantized matrix product requantized to the output scale and zero point."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._qrc import EIGHT_BIT, check_quant_dtype, matmul_shape
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
        return [Info(y_zero.dtype, matmul_shape(node, a.shape, b.shape))]
