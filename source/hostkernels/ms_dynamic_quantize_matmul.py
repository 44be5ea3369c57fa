"""DynamicQuantizeMatMul (com.microsoft) on the CPU: A quantized as DynamicQuantizeLinear does it (uint8, one
scale and zero point for the whole tensor), then MatMulIntegerToFloat's exact integer product and float32
dequantization (+ bias), as onnxruntime computes it."""
from __future__ import annotations

from nnhal.hostkernels.base import FunctionKernel
from nnhal.hostkernels.ms_matmul_integer_to_float import MatMulIntegerToFloatKernel
from nnhal.hostkernels.op_dynamic_quantize_linear import DynamicQuantizeLinearKernel


class DynamicQuantizeMatMulKernel(FunctionKernel):
    op_type = "DynamicQuantizeMatMul"
    # the two steps; the cpu device's subclass runs the product on its pool and the quantization natively
    quantize = DynamicQuantizeLinearKernel()
    product = MatMulIntegerToFloatKernel()

    def quantizer(self) -> DynamicQuantizeLinearKernel:
        """The kernel that quantizes A."""
        return self.quantize

    def compute(self, node, a, b, b_scale, b_zero=None, bias=None):
        aq, a_scale, a_zero = self.quantizer().compute(node, a)
        return self.product.compute(node, aq, b, a_scale, b_scale, a_zero, b_zero, bias)


IMPLEMENTATIONS = (DynamicQuantizeMatMulKernel,)
