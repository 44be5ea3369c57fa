"""Gather on the CPU: numpy take with negative indices wrapped."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._shape import wrap_indices
from nnhal.hostkernels.base import Kernel, RunFn


class GatherKernel(Kernel):
    op_type = "Gather"

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            data, indices = inputs
            axis = node.attrs["axis"] % data.ndim
            idx = wrap_indices(indices, data.shape[axis])
            return (np.take(data, idx, axis=axis, out=outputs[0]),)

        return run


IMPLEMENTATIONS = (GatherKernel,)
