"""Inference BatchNormalization of a channels-last float32 image with constant parameters, and the activation
the CPU plan fused into it, in one native pass (kernels.c channel_affine: y = act(x * a[c] + b[c])), rows split
over the native pool. The numpy NHWC kernel (hostkernels/op_batch_normalization.py) makes a multiply, an add
and an activation pass; DenseNet's pre-activation BatchNormalization + Relu spent 11% of its run there.

The fold of the parameters into a and b is the reference's (float64, then float32); the product and the sum may
be one fused multiply-add here (one rounding fewer).
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.hostkernels.base import RunFn
from nnhal.hostkernels.fused import activation_of
from nnhal.hostkernels.op_batch_normalization import BatchNormalizationNHWC, fold


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
            x = inputs[0]
            if not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            y = outputs[0]
            if y is None or not y.flags.c_contiguous:
                y = np.empty(x.shape, np.float32)
            parts = parallel.native_parts(size, rows) if parallel.native_pool() else 1
            affine(x, y, a, b, act, parts)
            return (y,)

        return run


IMPLEMENTATIONS = (BatchNormalizationNative,)
