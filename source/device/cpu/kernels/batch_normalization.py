"""BatchNormalization on the cpu device, channels last (beside the host's NCHW kernel,
hostkernels/op_batch_normalization.py, whose ``fold`` it shares)."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels import _nhwc
from nnhal.device.cpu.kernels._gates import apply_activation
from nnhal.hostkernels import _blocks
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.fused import activation_of
from nnhal.hostkernels.op_batch_normalization import fold


class BatchNormalizationNHWC(Kernel):
    """Channels last, inference, 4-D float input with (C,) parameters: y = x * a + b with a and b
    tiled into blocks multiplied and added over the flat input (_blocks.blockwise); a fused activation
    (set by the CPU plan) runs in place on y."""

    op_type = "BatchNormalization"
    name = "nhwc"
    layout = "NHWC"
    inplace = {0: 0}
    fuse_activation = True

    def score(self, node, ins, outs) -> int:
        if node.attrs.get("training_mode", 0) or any(node.outputs[1:]) or not _nhwc.image(ins[0]):
            return 0
        per_channel = (ins[0].shape[1],)
        params = ins[1:5]
        if len(params) != 4 or any(p is None or p.shape is None or tuple(p.shape) != per_channel for p in params):
            return 0
        return 10

    def prepare(self, node, ins, outs) -> RunFn:
        eps = float(node.attrs["epsilon"])
        dtype = outs[0].dtype
        consts = [i.value for i in ins[1:5]]
        blocks = None
        if all(c is not None for c in consts):
            # rank 2: fold returns the (C,) vectors, the NHWC broadcast form
            blocks = tuple(_blocks.tiled(p) for p in fold(*consts, eps, 2, dtype))
        act = activation_of(node)

        def run(inputs, outputs):
            x = inputs[0]
            a, b = blocks if blocks is not None else (_blocks.tiled(p) for p in fold(*inputs[1:5], eps, 2, dtype))
            y = outputs[0] if outputs[0] is not None else np.empty_like(x)
            flat = y.reshape(-1)
            _blocks.blockwise(np.multiply, x.reshape(-1), a, flat)
            _blocks.blockwise(np.add, flat, b, flat)
            apply_activation(y, act)
            return (y,)

        return run


IMPLEMENTATIONS = (BatchNormalizationNHWC,)
