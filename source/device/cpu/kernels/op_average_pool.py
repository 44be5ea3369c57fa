"""AveragePool on the CPU: windowed sums divided by per-window element counts."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels._nn import geometry_cache, sum_pool, window_counts
from nnhal.device.cpu.kernels.base import Kernel, RunFn


class AveragePoolKernel(Kernel):
    op_type = "AveragePool"

    def prepare(self, node, ins, outs) -> RunFn:
        geometry = geometry_cache(node)
        include_pad = bool(node.attrs.get("count_include_pad", 0))
        divisors: dict[tuple, np.ndarray] = {}

        def run(inputs, outputs):
            x = inputs[0]
            spatial = x.shape[2:]
            g = geometry(spatial)
            if spatial not in divisors:
                divisors[spatial] = window_counts(g, list(spatial), include_pad).astype(x.dtype)
            acc = sum_pool(x, g)
            return (np.divide(acc, divisors[spatial], out=outputs[0]),)

        return run


IMPLEMENTATIONS = (AveragePoolKernel,)
