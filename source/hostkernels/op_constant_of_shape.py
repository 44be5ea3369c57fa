"""ConstantOfShape on the CPU: a filled array."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._shape import ints
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_constant_of_shape import fill_value


class ConstantOfShapeKernel(Kernel):
    op_type = "ConstantOfShape"

    def prepare(self, node, ins, outs) -> RunFn:
        value = fill_value(node)

        def run(inputs, outputs):
            out = outputs[0]
            if out is None:
                return (np.full(tuple(ints(inputs[0])), value, dtype=value.dtype),)
            out.fill(value)
            return (out,)

        return run


IMPLEMENTATIONS = (ConstantOfShapeKernel,)
