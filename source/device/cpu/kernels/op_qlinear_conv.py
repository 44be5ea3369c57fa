"""QLinearConv on the CPU: exact integer convolution, bias, per-channel requantization."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels._qrc import channel_param, integer_conv, requantize, shifted, weight_zero
from nnhal.device.cpu.kernels.base import FunctionKernel


class QLinearConvKernel(FunctionKernel):
    op_type = "QLinearConv"

    def compute(self, node, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias=None):
        acc = integer_conv(node, shifted(x, x_zero), shifted(w, weight_zero(w_zero, w.ndim)))
        if bias is not None:
            acc += channel_param(bias.astype(np.float64), acc.ndim)
        factor = np.asarray(x_scale).reshape(()) * channel_param(w_scale, acc.ndim) / np.asarray(y_scale).reshape(())
        return requantize(acc, factor, y_zero, y_zero.dtype)


IMPLEMENTATIONS = (QLinearConvKernel,)
