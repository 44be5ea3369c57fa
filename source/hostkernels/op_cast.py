"""Cast on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._unary import convert
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.table import get_prototype


class CastKernel(Kernel):
    op_type = "Cast"

    def prepare(self, node, ins, outs) -> RunFn:
        dtype = get_prototype(node.domain, node.op_type).target(node)

        def run(inputs, outputs):
            return (convert(inputs[0], dtype, outputs[0]),)

        return run


IMPLEMENTATIONS = (CastKernel,)
