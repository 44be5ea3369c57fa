"""Relu on the CPU: in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels.base import Kernel, RunFn


class ReluKernel(Kernel):
    op_type = "Relu"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        zero = np.zeros((), dtype=outs[0].dtype)

        def run(inputs, outputs):
            return (np.maximum(inputs[0], zero, out=outputs[0]),)

        return run


IMPLEMENTATIONS = (ReluKernel,)
