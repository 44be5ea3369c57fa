"""CastLike on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._unary import convert
from nnhal.hostkernels.base import Kernel, RunFn


class CastLikeKernel(Kernel):
    op_type = "CastLike"

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            return (convert(inputs[0], inputs[1].dtype, outputs[0]),)

        return run


IMPLEMENTATIONS = (CastLikeKernel,)
