"""LRN on the CPU: channel-window sums of squares, one shifted add per tap."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


class LRNKernel(Kernel):
    op_type = "LRN"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        size = int(node.attrs["size"])
        alpha, beta, bias = (float(node.attrs[k]) for k in ("alpha", "beta", "bias"))
        before = (size - 1) // 2

        def run(inputs, outputs):
            x = inputs[0]
            c = x.shape[1]
            sq = np.zeros((x.shape[0], c + size - 1) + x.shape[2:], dtype=x.dtype)
            np.square(x, out=sq[:, before:before + c])
            window = sq[:, :c].copy()
            for k in range(1, size):
                window += sq[:, k:k + c]
            t = x.dtype.type
            denom = np.power(window * t(alpha / size) + t(bias), t(beta))
            return (np.divide(x, denom, out=outputs[0]),)

        return run


IMPLEMENTATIONS = (LRNKernel,)
