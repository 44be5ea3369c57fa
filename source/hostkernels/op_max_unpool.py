"""MaxUnpool on the CPU: scatter by flat index, then place in the requested output shape."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.table import get_prototype


class MaxUnpoolKernel(Kernel):
    op_type = "MaxUnpool"

    def prepare(self, node, ins, outs) -> RunFn:
        proto = get_prototype("", "MaxUnpool")

        def run(inputs, outputs):
            x, indices = inputs[0], inputs[1]
            shape_in = inputs[2] if len(inputs) > 2 else None
            inferred = proto.default_shape(node, x.shape)
            flat = np.zeros(int(np.prod(inferred)), dtype=x.dtype)
            flat[indices.reshape(-1)] = x.reshape(-1)
            if shape_in is None:
                return (flat.reshape(inferred),)
            shape = tuple(int(v) for v in shape_in.reshape(-1))
            y = outputs[0] if outputs[0] is not None else np.empty(shape, dtype=x.dtype)
            y[...] = 0
            y[tuple(slice(0, min(a, b)) for a, b in zip(inferred, shape))] = \
                flat.reshape(inferred)[tuple(slice(0, min(a, b)) for a, b in zip(inferred, shape))]
            return (y,)

        return run


IMPLEMENTATIONS = (MaxUnpoolKernel,)
