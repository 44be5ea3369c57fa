"""CenterCropPad on the CPU: crop the centered window, paste it centered into zeros."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._shape import ints, zero_of
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_center_crop_pad import crop_axes


class CenterCropPadKernel(Kernel):
    op_type = "CenterCropPad"

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            x, shape = inputs[0], ints(inputs[1])
            dims = list(x.shape)
            src = [slice(None)] * x.ndim
            dst = [slice(None)] * x.ndim
            for a, s in zip(crop_axes(node, x.ndim, len(shape)), shape):
                d = x.shape[a]
                if s < d:
                    start = (d - s) // 2
                    src[a] = slice(start, start + s)
                elif s > d:
                    start = (s - d) // 2
                    dst[a] = slice(start, start + d)
                dims[a] = s
            out = outputs[0] if outputs[0] is not None else np.empty(dims, dtype=x.dtype)
            out[...] = zero_of(x.dtype)
            out[tuple(dst)] = x[tuple(src)]
            return (out,)

        return run


IMPLEMENTATIONS = (CenterCropPadKernel,)
