"""IsInf on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


class IsInfKernel(Kernel):
    op_type = "IsInf"

    def prepare(self, node, ins, outs) -> RunFn:
        positive, negative = bool(node.attrs["detect_positive"]), bool(node.attrs["detect_negative"])

        def run(inputs, outputs):
            x, out = inputs[0], outputs[0]
            if out is None:
                out = np.empty(x.shape, np.bool_)
            if positive and negative:
                np.isinf(x, out=out)
            elif positive:
                np.isposinf(x, out=out)
            elif negative:
                np.isneginf(x, out=out)
            else:
                out.fill(False)
            return (out,)

        return run


IMPLEMENTATIONS = (IsInfKernel,)
