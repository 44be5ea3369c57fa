"""ConvInteger on the CPU: exact integer convolution through float64 im2col + GEMM."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._qrc import integer_conv, shifted, weight_zero
from nnhal.hostkernels.base import FunctionKernel


class ConvIntegerKernel(FunctionKernel):
    op_type = "ConvInteger"

    def compute(self, node, x, w, x_zero=None, w_zero=None):
        # NOTE: padding is applied after the zero-point shift, so pads hold x_zero_point.
        y = integer_conv(node, shifted(x, x_zero), shifted(w, weight_zero(w_zero, w.ndim)))
        return y.astype(np.int32)


IMPLEMENTATIONS = (ConvIntegerKernel,)
