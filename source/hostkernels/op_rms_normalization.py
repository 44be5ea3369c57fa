"""RMSNormalization on the CPU, computed in the stash dtype."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator._nn import STASH_TYPES


class RMSNormalizationKernel(Kernel):
    op_type = "RMSNormalization"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        eps = float(node.attrs["epsilon"])
        stash = STASH_TYPES[int(node.attrs["stash_type"])]
        axis_attr = node.attrs["axis"]

        def run(inputs, outputs):
            x, scale = inputs
            axis = axis_attr + x.ndim if axis_attr < 0 else axis_attr
            axes = tuple(range(axis, x.ndim))
            xs = x.astype(stash, copy=False)
            inv = 1 / np.sqrt(np.mean(np.square(xs), axis=axes, keepdims=True) + stash.type(eps))
            y = (xs * inv).astype(x.dtype, copy=False)
            return (np.multiply(y, scale, out=outputs[0], casting="unsafe"),)

        return run


IMPLEMENTATIONS = (RMSNormalizationKernel,)
