"""GlobalAveragePool on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


class GlobalAveragePoolKernel(Kernel):
    op_type = "GlobalAveragePool"

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            x = inputs[0]
            axes = tuple(range(2, x.ndim))
            return (np.mean(x, axis=axes, keepdims=True, out=outputs[0]),)

        return run


IMPLEMENTATIONS = (GlobalAveragePoolKernel,)
