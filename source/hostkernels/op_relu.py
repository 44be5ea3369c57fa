"""Relu on the CPU: in place when the input dies here."""
from __future__ import annotations

from nnhal.hostkernels import _blocks
from nnhal.hostkernels.base import Kernel, RunFn


class ReluKernel(Kernel):
    op_type = "Relu"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            return (_blocks.relu(inputs[0], outputs[0]),)

        return run


IMPLEMENTATIONS = (ReluKernel,)
