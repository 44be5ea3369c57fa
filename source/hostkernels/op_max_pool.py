"""MaxPool on the CPU: one strided maximum per kernel tap over a -inf padded input."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels import _pool2d
from nnhal.hostkernels._nn import geometry_cache, max_pool, max_pool_indices
from nnhal.hostkernels.base import Kernel, RunFn, store


class MaxPoolKernel(Kernel):
    op_type = "MaxPool"

    def prepare(self, node, ins, outs) -> RunFn:
        geometry = geometry_cache(node)
        want_indices = len(node.outputs) > 1 and bool(node.outputs[1])
        storage_order = node.attrs.get("storage_order", 0)

        def run(inputs, outputs):
            x = inputs[0]
            g = geometry(x.shape[2:])
            if not want_indices:
                return (max_pool(x, g, outputs[0]),) + (None,) * (len(outputs) - 1)
            y, idx = max_pool_indices(x, g, storage_order)
            return store(y, outputs[0]), store(idx, outputs[1])

        return run


class MaxPoolSeparable(Kernel):
    """2-D, float, static, no indices output: separable maxima over a -inf padded scratch copy."""

    op_type = "MaxPool"
    name = "separable"
    make_pool = staticmethod(_pool2d.make_pool)

    def score(self, node, ins, outs) -> int:
        if len(node.outputs) > 1 and node.outputs[1]:
            return 0
        return 10 if _pool2d.usable(node, ins, outs) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        g = _pool2d.usable(node, ins, outs)
        dtype = outs[0].dtype
        pool = self.make_pool(g, tuple(ins[0].shape), dtype, np.maximum, -np.inf)
        n, c, oh, ow = outs[0].shape
        shape = (n, oh, ow, c) if self.layout == "NHWC" else (n, c, oh, ow)

        def run(inputs, outputs):
            out = outputs[0] if outputs[0] is not None else np.empty(shape, dtype)
            return (pool(inputs[0], out),) + (None,) * (len(outputs) - 1)

        return run


IMPLEMENTATIONS = (MaxPoolKernel, MaxPoolSeparable)
