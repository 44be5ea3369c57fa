"""Expand on the CPU: a broadcast copy."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._shape import ints, put
from nnhal.hostkernels.base import Kernel, RunFn


class ExpandKernel(Kernel):
    op_type = "Expand"

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            x, shape = inputs[0], ints(inputs[1])
            try:
                target = np.broadcast_shapes(x.shape, tuple(shape))
            except ValueError:
                raise ValueError(f"shape {shape} does not broadcast with the input's {list(x.shape)}") from None
            return (put(np.broadcast_to(x, target), outputs[0]),)

        return run


IMPLEMENTATIONS = (ExpandKernel,)
