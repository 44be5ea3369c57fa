"""MeanVarianceNormalization on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


class MeanVarianceNormalizationKernel(Kernel):
    op_type = "MeanVarianceNormalization"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        axes_attr = node.attrs["axes"]

        def run(inputs, outputs):
            x = inputs[0]
            axes = tuple(sorted(a + x.ndim if a < 0 else a for a in axes_attr))
            d = x - x.mean(axis=axes, keepdims=True)
            std = np.sqrt(np.mean(np.square(d), axis=axes, keepdims=True))
            return (np.divide(d, std + x.dtype.type(1e-9), out=outputs[0]),)

        return run


IMPLEMENTATIONS = (MeanVarianceNormalizationKernel,)
