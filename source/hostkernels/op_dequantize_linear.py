"""DequantizeLinear on the CPU: per-tensor, per-axis and blocked."""
from __future__ import annotations

import numpy as np

from nnhal.graph.dtypes import to_numpy
from nnhal.hostkernels._qrc import expand_param
from nnhal.hostkernels.base import FunctionKernel


class DequantizeLinearKernel(FunctionKernel):
    op_type = "DequantizeLinear"

    def compute(self, node, x, scale, zero=None):
        axis = node.attrs.get("axis", 1)
        block = node.attrs.get("block_size", 0)
        code = node.attrs.get("output_dtype", 0)
        dtype = to_numpy(code) if code else scale.dtype
        # NOTE: x - zero is exact in float32 up to 16-bit inputs; int32 works in float64.
        work = np.float64 if x.dtype.itemsize > 2 else np.float32
        dx = x.astype(work)
        if zero is not None:
            dx -= expand_param(zero, x.shape, axis, block).astype(work)
        y = dx * expand_param(scale, x.shape, axis, block).astype(work)
        return y.astype(dtype, copy=False)


IMPLEMENTATIONS = (DequantizeLinearKernel,)
