"""Split on the CPU: each part copied into its own output."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._shape import ints, put
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_split import split_sizes


class SplitKernel(Kernel):
    op_type = "Split"

    def prepare(self, node, ins, outs) -> RunFn:
        count = len(node.outputs)

        def run(inputs, outputs):
            x = inputs[0]
            axis = node.attrs["axis"] % x.ndim
            split = ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
            if split is None and node.version < 13 and node.attrs.get("split"):
                split = list(node.attrs["split"])
            sizes = split_sizes(node, x.shape[axis], split, count)
            parts = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
            return tuple(put(p, o) for p, o in zip(parts, outputs))

        return run


IMPLEMENTATIONS = (SplitKernel,)
