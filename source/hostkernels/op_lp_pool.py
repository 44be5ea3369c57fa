"""LpPool on the CPU: (windowed sum of |x|^p)^(1/p)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._nn import geometry_cache, sum_pool
from nnhal.hostkernels.base import Kernel, RunFn


class LpPoolKernel(Kernel):
    op_type = "LpPool"

    def prepare(self, node, ins, outs) -> RunFn:
        geometry = geometry_cache(node)
        p = float(node.attrs["p"])

        def run(inputs, outputs):
            x = inputs[0]
            acc = sum_pool(x, geometry(x.shape[2:]), p)
            if p == 2:
                return (np.sqrt(acc, out=outputs[0]),)
            return (np.power(acc, x.dtype.type(1.0 / p), out=outputs[0]),)

        return run


IMPLEMENTATIONS = (LpPoolKernel,)
