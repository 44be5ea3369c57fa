"""Mul by a vector along the last axis in one native pass split over the native pool (kernels.c
channel_affine: y = x * scale + 0 per channel), beside the host kernels (op_mul's numpy ufunc and its
blockwise ChannelMulKernel).

The case is a squeeze-excite gate once the CPU layout pass has made the block channels last: the
(N, H, W, C) map times the (N, 1, 1, C) gate computed at run time (MobileNetV3, EfficientNet, SE-ResNeXt),
and a layer scale against a constant (C,) vector. The host kernels run it on one thread, and the
blockwise one only for maps of at least op_mul.RUNTIME_MIN elements when the gate is a run-time tensor;
here every float32 map of that form runs natively, image by image when the gate differs per image.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.hostkernels import op_mul
from nnhal.hostkernels.base import RunFn, ufunc_run
from nnhal.hostkernels.op_mul import MulKernel
from nnhal.operator.base import Info


def channel_operand(ins: list[Info | None], outs: list[Info]) -> int | None:
    """Which input (0 or 1) is the gate: op_mul.channel_operand's per-image vector, float32, smaller than the
    map; None for any other Mul."""
    if outs[0].dtype != np.float32:
        return None
    k = op_mul.channel_operand(ins, outs, per_image=True)
    if k is None or int(np.prod(ins[k].shape)) >= int(np.prod(outs[0].shape)):
        return None
    return k


class MulChannelNative(MulKernel):
    """(N, ..., C) times a per-image or shared (C,) vector (either operand order), float32: one native
    channel_affine pass per image over the native pool."""

    name = "native"

    def score(self, node, ins, outs) -> int:
        return 3 if native.available() and channel_operand(ins, outs) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        k = channel_operand(ins, outs)
        shape = tuple(outs[0].shape)
        vec = tuple(ins[k].shape)
        c = shape[-1]
        # the gate's batch: one vector per image only when it is as long as the output's batch axis
        per_image = len(vec) == len(shape) and vec[0] == shape[0] and shape[0] > 1
        images = shape[0] if per_image else 1
        size = int(np.prod(shape, dtype=np.int64))
        rows = size // (images * c) if size else 0
        zeros = np.zeros(c, np.float32)
        identity = native.make_act("clip")              # no activation (an unbounded Clip)
        affine = native.channel_affine

        def run(inputs, outputs):
            x, g = inputs[1 - k], inputs[k]
            y = outputs[0]
            if y is None or not y.flags.c_contiguous:
                y = np.empty(shape, np.float32)
            if not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            gates = np.ascontiguousarray(g, np.float32).reshape(images, c)
            parts = parallel.native_parts(size // images, rows) if parallel.native_pool() else 1
            xs, ys = x.reshape(images, rows, c), y.reshape(images, rows, c)
            for i in range(images):
                affine(xs[i], ys[i], gates[i], zeros, identity, parts)
            return (y,)

        # NOTE: marked as numpy's multiply (the same bits): the native step program (steps.py) still takes the
        # small ones in the ONNX layout, as it did when the host kernels ran them
        return ufunc_run(run, np.multiply)


IMPLEMENTATIONS = (MulChannelNative,)
