"""GlobalMaxPool on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


class GlobalMaxPoolKernel(Kernel):
    op_type = "GlobalMaxPool"

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            x = inputs[0]
            axes = tuple(range(2, x.ndim))
            return (np.max(x, axis=axes, keepdims=True, out=outputs[0]),)

        return run


IMPLEMENTATIONS = (GlobalMaxPoolKernel,)
