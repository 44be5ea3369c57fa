"""BatchNormalization on the cpu device, channels last (beside the host's NCHW kernel,
hostkernels/op_batch_normalization.py, whose ``fold`` it shares).

Inference BatchNormalization of a channels-last float32 image with constant parameters, and the activation
the CPU plan fused into it, in one native pass (kernels.c channel_affine: y = act(x * a[c] + b[c])), rows split
over the native pool. The numpy NHWC kernel (hostkernels/op_batch_normalization.py) makes a multiply, an add
and an activation pass; DenseNet's pre-activation BatchNormalization + Relu spent 11% of its run there.

The fold of the parameters into a and b is the reference's (float64, then float32); the product and the sum may
be one fused multiply-add here (one rounding fewer).
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels import _nhwc
from nnhal.device.cpu.kernels._gates import apply_activation
from nnhal.device.cpu.kernels._io import contiguous_io
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


def _act(node):
    """The native Act of the activation fused into ``node`` (an identity Clip when there is none)."""
    act = activation_of(node)
    if act is None:
        return native.make_act("clip")
    return native.make_act(act.kind, None if act.lo is None else float(act.lo),
                           None if act.hi is None else float(act.hi), act.alpha, act.beta)


class BatchNormalizationNative(BatchNormalizationNHWC):
    name = "nhwc-native"

    def score(self, node, ins, outs) -> int:
        if not native.available() or super().score(node, ins, outs) == 0:
            return 0
        if ins[0].dtype != np.float32 or outs[0].dtype != np.float32 or any(i.value is None for i in ins[1:5]):
            return 0
        return 11

    def prepare(self, node, ins, outs) -> RunFn:
        a, b = (np.ascontiguousarray(p, np.float32) for p in
                fold(*(i.value for i in ins[1:5]), float(node.attrs["epsilon"]), 2, np.float32))
        act = _act(node)
        shape = tuple(outs[0].shape)
        c = a.size
        size = int(np.prod(shape, dtype=np.int64))
        rows = size // max(1, c)
        affine = native.channel_affine

        def run(inputs, outputs):
            x, y = contiguous_io(inputs, outputs, shape, np.float32)
            parts = parallel.native_parts(size, rows) if parallel.native_pool() else 1
            affine(x, y, a, b, act, parts)
            return (y,)

        return run


IMPLEMENTATIONS = (BatchNormalizationNHWC, BatchNormalizationNative)
