"""AveragePool on the CPU: windowed sums divided by per-window element counts."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels import _pool2d
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


class AveragePoolSeparable(Kernel):
    """2-D, float, static: separable window sums over a zero padded scratch copy, divided by the counts."""

    op_type = "AveragePool"
    name = "separable"

    def score(self, node, ins, outs) -> int:
        return 10 if _pool2d.usable(node, ins, outs) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        g = _pool2d.usable(node, ins, outs)
        dtype = outs[0].dtype
        spatial = list(ins[0].shape[2:])
        include_pad = bool(node.attrs.get("count_include_pad", 0))
        counts = window_counts(g, spatial, include_pad)
        uniform = bool(np.all(counts == counts.flat[0]))
        divisor = dtype.type(counts.flat[0]) if uniform else counts.astype(dtype)
        pool = _pool2d.make_pool(g, tuple(ins[0].shape), dtype, np.add, 0)
        shape = tuple(outs[0].shape)

        def run(inputs, outputs):
            out = outputs[0] if outputs[0] is not None else np.empty(shape, dtype)
            pool(inputs[0], out)
            return (np.divide(out, divisor, out=out),)

        return run


IMPLEMENTATIONS = (AveragePoolKernel, AveragePoolSeparable)
