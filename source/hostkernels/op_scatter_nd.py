"""ScatterND on the CPU: copy, then assign or reduce the addressed slices."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._shape import copy_of, scatter, wrap_indices
from nnhal.hostkernels.base import Kernel, RunFn


class ScatterNDKernel(Kernel):
    op_type = "ScatterND"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        reduction = node.attrs.get("reduction", "none")

        def run(inputs, outputs):
            data, indices, updates = inputs
            k = indices.shape[-1]
            dims = np.array(data.shape[:k], dtype=np.int64)
            idx = wrap_indices(indices, dims)
            out = copy_of(data, outputs[0])
            return (scatter(out, tuple(np.moveaxis(idx, -1, 0)), updates, reduction),)

        return run


IMPLEMENTATIONS = (ScatterNDKernel,)
