"""LpNormalization on the CPU: zero where the norm is zero."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


class LpNormalizationKernel(Kernel):
    op_type = "LpNormalization"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        axis, p = node.attrs["axis"], node.attrs["p"]

        def run(inputs, outputs):
            x = inputs[0]
            if p == 1:
                norm = np.sum(np.abs(x), axis=axis, keepdims=True)
            else:
                norm = np.sqrt(np.sum(np.square(x), axis=axis, keepdims=True))
            safe = np.where(norm == 0, x.dtype.type(1), norm)
            return (np.divide(x, safe, out=outputs[0]),)

        return run


IMPLEMENTATIONS = (LpNormalizationKernel,)
