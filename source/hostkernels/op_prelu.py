"""PRelu on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn, store


class PReluKernel(Kernel):
    op_type = "PRelu"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        dtype = outs[0].dtype

        def run(inputs, outputs):
            x, slope = inputs
            return (store(np.where(x < 0, x * slope, x), outputs[0], dtype or x.dtype),)

        return run


IMPLEMENTATIONS = (PReluKernel,)
