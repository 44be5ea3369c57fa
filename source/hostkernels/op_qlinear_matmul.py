"""QLinearMatMul on the CPU: exact integer product, then one requantizing multiply."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._qrc import col_param, requantize, row_param, shifted
from nnhal.hostkernels.base import FunctionKernel


class QLinearMatMulKernel(FunctionKernel):
    op_type = "QLinearMatMul"
    # the matrix product; the cpu device's subclass runs it on its pool (device/cpu/kernels/_pooled.py)
    matmul = staticmethod(np.matmul)

    def compute(self, node, a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero):
        acc = self.matmul(shifted(a, row_param(a_zero, a.shape)), shifted(b, col_param(b_zero)))
        # NOTE: the combined scale is formed in the scales' own type, as ONNX defines it.
        factor = row_param(a_scale, a.shape) * col_param(b_scale) / np.asarray(y_scale).reshape(())
        return requantize(acc, factor, y_zero, y_zero.dtype)


IMPLEMENTATIONS = (QLinearMatMulKernel,)
