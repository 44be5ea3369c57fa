"""QuantizeLinear on the CPU: per-tensor, per-axis and blocked, round half to even, saturating."""
from __future__ import annotations

import numpy as np

from nnhal.graph.dtypes import to_numpy
from nnhal.hostkernels._qrc import expand_param, saturate
from nnhal.hostkernels.base import FunctionKernel


class QuantizeLinearKernel(FunctionKernel):
    op_type = "QuantizeLinear"

    def compute(self, node, x, scale, zero=None):
        axis = node.attrs.get("axis", 1)
        block = node.attrs.get("block_size", 0)
        precision = node.attrs.get("precision", 0)
        if precision:
            work = to_numpy(precision)
        else:
            # NOTE: the division runs in the promoted type of x and scale, as the
            # ONNX reference does (float32 x with float16 scale divides in float32).
            work = np.result_type(x.dtype, scale.dtype)
            if work.kind != "f":
                work = np.dtype(np.float64)
        s = expand_param(scale, x.shape, axis, block).astype(work, copy=False)
        q = np.rint(x.astype(work, copy=False) / s).astype(np.float64)
        if zero is not None:
            q += expand_param(zero, x.shape, axis, block).astype(np.float64)
        dtype = zero.dtype if zero is not None else self._dtype(node)
        return saturate(q, dtype)

    def _dtype(self, node) -> np.dtype:
        code = node.attrs.get("output_dtype", 0)
        return to_numpy(code) if code else np.dtype(np.uint8)


IMPLEMENTATIONS = (QuantizeLinearKernel,)
