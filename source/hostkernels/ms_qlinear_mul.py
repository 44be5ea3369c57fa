"""QLinearMul (com.microsoft) on the CPU: dequantize, mul in float32, requantize."""
from __future__ import annotations

from nnhal.hostkernels._msq import real, to_quantized
from nnhal.hostkernels.base import FunctionKernel


class QLinearMulKernel(FunctionKernel):
    op_type = "QLinearMul"

    def compute(self, node, a, a_scale, a_zero, b, b_scale, b_zero, c_scale, c_zero=None):
        value = real(a, a_scale, a_zero) * real(b, b_scale, b_zero)
        return to_quantized(value, c_scale, c_zero, a.dtype)


IMPLEMENTATIONS = (QLinearMulKernel,)
