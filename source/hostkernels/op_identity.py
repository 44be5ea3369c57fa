"""Identity on the CPU: the output is the input (a declared view)."""
from __future__ import annotations

from nnhal.hostkernels.base import Kernel, RunFn


class IdentityKernel(Kernel):
    op_type = "Identity"
    view = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            return (inputs[0],)

        return run


IMPLEMENTATIONS = (IdentityKernel,)
