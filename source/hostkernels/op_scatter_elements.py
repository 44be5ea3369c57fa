"""ScatterElements (and Scatter) on the CPU: copy, then assign or reduce with ufunc.at."""
from __future__ import annotations

from nnhal.hostkernels._shape import axis_index, copy_of, scatter
from nnhal.hostkernels.base import Kernel, RunFn


class ScatterElementsKernel(Kernel):
    op_type = "ScatterElements"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        reduction = node.attrs.get("reduction", "none")

        def run(inputs, outputs):
            data, indices, updates = inputs
            axis = node.attrs["axis"] % data.ndim
            out = copy_of(data, outputs[0])
            return (scatter(out, axis_index(indices, axis, data.shape[axis]), updates, reduction),)

        return run


IMPLEMENTATIONS = (ScatterElementsKernel,)
