"""Slice on the CPU: a strided copy of the selected region."""
from __future__ import annotations

from nnhal.hostkernels._shape import ints, put
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator._shape import slice_params, to_slice
from nnhal.operator.op_slice import slice_spec


class SliceKernel(Kernel):
    op_type = "Slice"

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            x = inputs[0]
            if node.version < 10:
                axes = node.attrs["axes"]
                params = (list(node.attrs["starts"]), list(node.attrs["ends"]),
                          None if axes is None else list(axes), None)
            else:
                params = tuple(ints(inputs[i]) if i < len(inputs) else None for i in range(1, 5))
            index = [slice(None)] * x.ndim
            for axis, start, end, step in slice_spec(node, x.ndim, *params):
                start, end, _ = slice_params(start, end, step, x.shape[axis])
                index[axis] = to_slice(start, end, step)
            return (put(x[tuple(index)], outputs[0]),)

        return run


IMPLEMENTATIONS = (SliceKernel,)
