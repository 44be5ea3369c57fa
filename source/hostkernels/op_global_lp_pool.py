"""GlobalLpPool on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


class GlobalLpPoolKernel(Kernel):
    op_type = "GlobalLpPool"

    def prepare(self, node, ins, outs) -> RunFn:
        p = float(node.attrs["p"])

        def run(inputs, outputs):
            x = inputs[0]
            axes = tuple(range(2, x.ndim))
            acc = np.sum(np.abs(x) ** p, axis=axes, keepdims=True)
            return (np.power(acc, x.dtype.type(1.0 / p), out=outputs[0]),)

        return run


IMPLEMENTATIONS = (GlobalLpPoolKernel,)
