"""LRN on the cpu device, channels last (beside the host's NCHW kernel, hostkernels/op_lrn.py)."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels import _nhwc
from nnhal.hostkernels.base import Kernel, RunFn


class LRNNHWC(Kernel):
    """Channels last, 4-D float, static: the channel window is the contiguous last axis (_nhwc.make_lrn)."""

    op_type = "LRN"
    name = "nhwc"
    layout = "NHWC"
    inplace = {0: 0}

    def score(self, node, ins, outs) -> int:
        return 10 if _nhwc.image(ins[0]) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        n, c, h, w = ins[0].shape
        alpha, beta, bias = (float(node.attrs[k]) for k in ("alpha", "beta", "bias"))
        lrn = _nhwc.make_lrn(n * h * w, c, int(node.attrs["size"]), alpha, beta, bias, outs[0].dtype)

        def run(inputs, outputs):
            x = inputs[0]
            out = outputs[0] if outputs[0] is not None else np.empty_like(x)
            lrn(x.reshape(-1, c), out.reshape(-1, c))
            return (out,)

        return run


IMPLEMENTATIONS = (LRNNHWC,)
