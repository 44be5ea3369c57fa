"""DynamicQuantizeLinear on the CPU: uint8 range from min(x, 0) to max(x, 0)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._qrc import saturate
from nnhal.hostkernels.base import FunctionKernel

_QMIN, _QMAX = 0, 255


class DynamicQuantizeLinearKernel(FunctionKernel):
    op_type = "DynamicQuantizeLinear"

    def compute(self, node, x):
        f32 = np.float32
        hi = f32(max(0.0, float(np.max(x)))) if x.size else f32(0)
        lo = f32(min(0.0, float(np.min(x)))) if x.size else f32(0)
        # NOTE: an all-zero input would give scale 0; onnxruntime uses 1 instead.
        scale = f32(hi - lo) / f32(_QMAX - _QMIN) if hi != lo else f32(1)
        zero = np.rint(np.clip(f32(_QMIN) - lo / scale, _QMIN, _QMAX))
        y = saturate(np.rint(x / scale) + zero, np.dtype(np.uint8))
        return y, np.array(scale, dtype=f32), np.array(zero, dtype=np.uint8)


IMPLEMENTATIONS = (DynamicQuantizeLinearKernel,)
