"""MatMulIntegerToFloat (com.microsoft): (A - a_zero) (B - b_zero) * a_scale * b_scale (+ bias), float Y; what
onnxruntime's dynamic quantization writes after a DynamicQuantizeLinear of the activations."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._qrc import EIGHT_BIT, check_quant_dtype, matmul_shape
from nnhal.operator.base import Info, Prototype


class MatMulIntegerToFloat(Prototype):
    op_type = "MatMulIntegerToFloat"
    domain = "com.microsoft"
    versions = (1,)
    inputs = (4, 7)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        a, b, a_scale = ins[0], ins[1], ins[2]
        check_quant_dtype(node, a.dtype, "A", EIGHT_BIT)
        check_quant_dtype(node, b.dtype, "B", EIGHT_BIT)
        if a_scale.dtype is not None and a_scale.dtype.kind != "f":
            raise self.fail(node, f"a_scale must be a float tensor, got {a_scale.dtype}")
        return [Info(a_scale.dtype, matmul_shape(node, a.shape, b.shape))]
