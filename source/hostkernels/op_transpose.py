"""Transpose on the CPU: a strided copy."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._shape import put
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_transpose import permutation


class TransposeKernel(Kernel):
    op_type = "Transpose"

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            x = inputs[0]
            return (put(np.transpose(x, permutation(node, x.ndim)), outputs[0]),)

        return run


IMPLEMENTATIONS = (TransposeKernel,)
