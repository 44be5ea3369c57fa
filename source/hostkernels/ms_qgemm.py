"""QGemm (com.microsoft) on the CPU: exact integer product (float64 BLAS), int32 bias, float32 rescale."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._msq import to_quantized
from nnhal.hostkernels.base import FunctionKernel


class QGemmKernel(FunctionKernel):
    op_type = "QGemm"
    # the matrix product; the cpu device's subclass runs it on its pool (device/cpu/kernels/_pooled.py)
    matmul = staticmethod(np.matmul)

    def compute(self, node, a, a_scale, a_zero, b, b_scale, b_zero, c=None, y_scale=None, y_zero=None):
        aa = a.astype(np.float64) - np.float64(np.asarray(a_zero))
        bz = np.asarray(b_zero, np.float64)
        bb = b.astype(np.float64) - (bz.reshape(-1, 1) if bz.size > 1 and node.attrs["transB"] else bz)
        if node.attrs["transA"]:
            aa = aa.T
        if node.attrs["transB"]:
            bb = bb.T
        acc = self.matmul(aa, bb)
        if c is not None:
            acc = acc + c.astype(np.float64)
        scale = np.float32(node.attrs["alpha"]) * np.asarray(a_scale, np.float32) * np.asarray(b_scale, np.float32)
        value = acc.astype(np.float32) * scale
        if y_scale is None:
            return value
        return to_quantized(value, y_scale, y_zero, y_zero.dtype if y_zero is not None else a.dtype)


IMPLEMENTATIONS = (QGemmKernel,)
