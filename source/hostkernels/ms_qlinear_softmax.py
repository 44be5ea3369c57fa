"""QLinearSoftmax (com.microsoft) on the CPU: the ONNX Softmax of the given opset on real values."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._msq import real, to_quantized
from nnhal.hostkernels.base import FunctionKernel


class QLinearSoftmaxKernel(FunctionKernel):
    op_type = "QLinearSoftmax"

    def compute(self, node, x, x_scale, x_zero, y_scale, y_zero=None):
        value = real(x, x_scale, x_zero)
        axis = node.attrs["axis"] % x.ndim
        if node.attrs["opset"] < 13:            # the old Softmax: flatten to 2-D at axis
            shape = value.shape
            value = value.reshape(int(np.prod(shape[:axis])), -1)
            axis = 1
        else:
            shape = None
        value = np.exp(value - value.max(axis=axis, keepdims=True))
        value /= value.sum(axis=axis, keepdims=True)
        if shape is not None:
            value = value.reshape(shape)
        return to_quantized(value, y_scale, y_zero, x.dtype)


IMPLEMENTATIONS = (QLinearSoftmaxKernel,)
