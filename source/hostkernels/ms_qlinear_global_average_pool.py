"""QLinearGlobalAveragePool (com.microsoft) on the CPU: integer sums, one float32 rescale."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._msq import to_quantized
from nnhal.hostkernels.base import FunctionKernel


class QLinearGlobalAveragePoolKernel(FunctionKernel):
    op_type = "QLinearGlobalAveragePool"

    def compute(self, node, x, x_scale, x_zero, y_scale, y_zero):
        axes = tuple(range(1, x.ndim - 1)) if node.attrs["channels_last"] else tuple(range(2, x.ndim))
        count = int(np.prod([x.shape[a] for a in axes]))
        total = np.sum(x.astype(np.int64) - np.int64(x_zero), axis=axes, keepdims=True)
        mean = total.astype(np.float32) * (np.asarray(x_scale, np.float32) / np.float32(count))
        return to_quantized(mean, y_scale, y_zero, x.dtype)


IMPLEMENTATIONS = (QLinearGlobalAveragePoolKernel,)
