"""DynamicQuantizeMatMul (com.microsoft): float A quantized to uint8 per tensor at run time (as
DynamicQuantizeLinear), times 8-bit B, dequantized to float (+ bias); what onnxruntime's quantize_dynamic
writes for a MatMul when its fused-op form is asked for."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._qrc import EIGHT_BIT, check_quant_dtype, matmul_shape
from nnhal.operator.base import Info, Prototype


class DynamicQuantizeMatMul(Prototype):
    op_type = "DynamicQuantizeMatMul"
    domain = "com.microsoft"
    versions = (1,)
    inputs = (3, 5)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        a, b, b_scale = ins[0], ins[1], ins[2]
        check_quant_dtype(node, a.dtype, "A", (np.dtype(np.float32),))
        check_quant_dtype(node, b.dtype, "B", EIGHT_BIT)
        if b_scale.dtype is not None and b_scale.dtype != a.dtype:
            raise self.fail(node, f"b_scale must have A's type {a.dtype}, got {b_scale.dtype}")
        return [Info(a.dtype, matmul_shape(node, a.shape, b.shape))]
