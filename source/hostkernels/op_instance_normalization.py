"""InstanceNormalization on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


class InstanceNormalizationKernel(Kernel):
    op_type = "InstanceNormalization"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        eps = float(node.attrs["epsilon"])

        def run(inputs, outputs):
            x, scale, bias = inputs
            axes = tuple(range(2, x.ndim))
            shape = (-1,) + (1,) * (x.ndim - 2)
            mean = x.mean(axis=axes, keepdims=True)
            d = x - mean
            var = np.mean(np.square(d), axis=axes, keepdims=True)
            d *= scale.reshape(shape) / np.sqrt(var + x.dtype.type(eps))
            return (np.add(d, bias.reshape(shape), out=outputs[0]),)

        return run


IMPLEMENTATIONS = (InstanceNormalizationKernel,)
