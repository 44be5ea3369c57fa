"""MatMulIntegerToFloat (com.microsoft) on the CPU: the exact integer product (float64 BLAS), then the scales
and the bias in float32."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._qrc import col_param, row_param, shifted
from nnhal.hostkernels.base import FunctionKernel


class MatMulIntegerToFloatKernel(FunctionKernel):
    op_type = "MatMulIntegerToFloat"
    # the matrix product; the cpu device's subclass runs it on its pool (device/cpu/kernels/_pooled.py)
    matmul = staticmethod(np.matmul)

    def compute(self, node, a, b, a_scale, b_scale, a_zero=None, b_zero=None, bias=None):
        # NOTE: |a - za| * |b - zb| <= 2^16, so float64 sums are exact for K < 2^37.
        acc = self.matmul(shifted(a, row_param(a_zero, a.shape)), shifted(b, col_param(b_zero)))
        dtype = np.asarray(a_scale).dtype
        y = acc.astype(dtype) * (np.asarray(a_scale, dtype) * col_param(np.asarray(b_scale, dtype)))
        if bias is not None:
            y += bias.astype(dtype, copy=False)
        return y


IMPLEMENTATIONS = (MatMulIntegerToFloatKernel,)
