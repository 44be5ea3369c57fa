"""Add on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels.base import Kernel, RunFn


class AddKernel(Kernel):
    op_type = "Add"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            return (np.add(inputs[0], inputs[1], out=outputs[0]),)

        return run


IMPLEMENTATIONS = (AddKernel,)
