"""Mean on the CPU: a numpy add fold over the inputs, divided by their count."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._binary import VariadicKernel, reduce_inputs
from nnhal.hostkernels.base import RunFn
from nnhal.operator.base import Info


class MeanKernel(VariadicKernel):
    op_type = "Mean"
    ufunc = np.add

    def prepare(self, node: Node, ins: list[Info | None], outs: list[Info]) -> RunFn:
        def run(inputs: list, outputs: list) -> tuple:
            total = reduce_inputs(np.add, inputs, outputs[0])
            return (np.divide(total, len(inputs), out=total),)

        return run


IMPLEMENTATIONS = (MeanKernel,)
