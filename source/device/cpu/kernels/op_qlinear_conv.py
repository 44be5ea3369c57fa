"""QLinearConv on the CPU: exact integer convolution, bias, per-channel requantization."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels._qrc import channel_param, integer_conv, saturate, shifted, weight_zero
from nnhal.device.cpu.kernels.base import FunctionKernel


class QLinearConvKernel(FunctionKernel):
    op_type = "QLinearConv"

    def compute(self, node, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias=None):
        acc = integer_conv(node, shifted(x, x_zero), shifted(w, weight_zero(w_zero, w.ndim)))
        if bias is not None:
            acc += channel_param(bias.astype(np.float64), acc.ndim)
        # NOTE: the rescale is computed in float32, as onnxruntime does, so pre-quantized models match
        # it bit for bit; the accumulator itself is exact (float64 holds every int32 sum).
        factor = (np.asarray(x_scale, np.float32).reshape(()) * channel_param(np.asarray(w_scale, np.float32), acc.ndim)
                  / np.asarray(y_scale, np.float32).reshape(()))
        y = acc.astype(np.float32) * factor.astype(np.float32)
        return saturate(np.rint(y) + np.asarray(y_zero, np.float32), y_zero.dtype)


IMPLEMENTATIONS = (QLinearConvKernel,)
