"""AveragePool on the CPU: windowed sums divided by per-window element counts."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels import _blocks, _pool2d
from nnhal.hostkernels._nn import geometry_cache, sum_pool, window_counts
from nnhal.hostkernels.base import Kernel, RunFn


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
    """2-D, float, static: separable window sums over a zero padded scratch copy, divided by the counts
    (a constant block when every window has the same count, else the per-position counts)."""

    op_type = "AveragePool"
    name = "separable"
    make_pool = staticmethod(_pool2d.make_pool)

    def score(self, node, ins, outs) -> int:
        return 10 if _pool2d.usable(node, ins, outs) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        g = _pool2d.usable(node, ins, outs)
        dtype = outs[0].dtype
        n, c, oh, ow = outs[0].shape
        last = self.layout == "NHWC"
        include_pad = bool(node.attrs.get("count_include_pad", 0))
        counts = window_counts(g, list(ins[0].shape[2:]), include_pad)
        uniform = bool(np.all(counts == counts.flat[0]))
        if uniform:
            divisor = _blocks.constant(counts.flat[0], dtype)
        else:
            divisor = np.repeat(counts.astype(dtype)[:, :, None], c, axis=2) if last else counts.astype(dtype)
        pool = self.make_pool(g, tuple(ins[0].shape), dtype, np.add, 0)
        shape = (n, oh, ow, c) if last else (n, c, oh, ow)

        def run(inputs, outputs):
            out = outputs[0] if outputs[0] is not None else np.empty(shape, dtype)
            pool(inputs[0], out)
            if uniform and out.flags.c_contiguous:
                flat = out.reshape(-1)
                _blocks.blockwise(np.divide, flat, divisor, flat)
                return (out,)
            # a channel slice of a wider tensor (see Kernel.strided_output): the same division, not blockwise
            return (np.divide(out, divisor[0] if uniform else divisor, out=out),)

        return run


IMPLEMENTATIONS = (AveragePoolKernel, AveragePoolSeparable)
