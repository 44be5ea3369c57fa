"""MatMulInteger on the CPU: exact integer products through float64 BLAS."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._qrc import col_param, row_param, shifted
from nnhal.hostkernels.base import FunctionKernel


class MatMulIntegerKernel(FunctionKernel):
    op_type = "MatMulInteger"
    # the matrix product; the cpu device's subclass runs it on its pool (device/cpu/kernels/_pooled.py)
    matmul = staticmethod(np.matmul)

    def compute(self, node, a, b, a_zero=None, b_zero=None):
        # NOTE: |a - za| * |b - zb| <= 2^16, so float64 sums are exact for K < 2^37.
        y = self.matmul(shifted(a, row_param(a_zero, a.shape)), shifted(b, col_param(b_zero)))
        return y.astype(np.int32)


IMPLEMENTATIONS = (MatMulIntegerKernel,)
