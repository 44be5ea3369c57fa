"""MaxPool on the CPU: one strided maximum per kernel tap over a -inf padded input."""
from __future__ import annotations

from nnhal.device.cpu.kernels._nn import geometry_cache, max_pool, max_pool_indices
from nnhal.device.cpu.kernels.base import Kernel, RunFn, store


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


IMPLEMENTATIONS = (MaxPoolKernel,)
