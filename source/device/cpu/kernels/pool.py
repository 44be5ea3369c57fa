"""MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool on the cpu device, channels last: the native
one-pass pooling of _pool_native for float32, else the separable numpy passes of _nhwc (beside the host's
NCHW kernels, hostkernels/op_max_pool.py and the others)."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels import _nhwc, _pool_native
from nnhal.hostkernels import _pool2d
from nnhal.hostkernels.base import RunFn
from nnhal.hostkernels.op_average_pool import AveragePoolSeparable
from nnhal.hostkernels.op_max_pool import MaxPoolSeparable

EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))


class MaxPoolNHWC(MaxPoolSeparable):
    """Channels last, 2-D, float, static, no indices output: the native one-pass kernel for float32 (any
    dilation, see _pool_native), else separable maxima (see _nhwc). Either writes into a channel slice."""

    name = "nhwc"
    layout = "NHWC"
    strided_output = True
    make_pool = staticmethod(_nhwc.make_pool)

    def score(self, node, ins, outs) -> int:
        if len(node.outputs) > 1 and node.outputs[1]:
            return 0
        return 10 if _pool_native.geometry(node, ins, outs) is not None else super().score(node, ins, outs)

    def prepare(self, node, ins, outs) -> RunFn:
        g = _pool_native.geometry(node, ins, outs)
        if g is None:
            return super().prepare(node, ins, outs)
        pool = _pool_native.make_pool(g, tuple(ins[0].shape), "max")
        n, c, oh, ow = outs[0].shape

        def run(inputs, outputs):
            out = outputs[0] if outputs[0] is not None else np.empty((n, oh, ow, c), np.float32)
            return (pool(inputs[0], out),) + (None,) * (len(outputs) - 1)

        run.bind = lambda inputs, outputs: pool.bind(inputs[0], outputs[0])
        return run


class MaxPoolNHWC8(MaxPoolSeparable):
    """Channels last, 2-D, 8-bit codes (a quantized network's MaxPool between two integer convolutions, as
    YOLO's SPPF): separable maxima of the codes themselves (see _nhwc), padding never chosen (the type's least
    value fills only empty windows). Exact: quantizing is monotone, so the maximum of the codes is the code of
    the maximum, and the tensor keeps its input's parameters."""

    name = "nhwc-8bit"
    layout = "NHWC"
    strided_output = True

    def score(self, node, ins, outs) -> int:
        if len(node.outputs) > 1 and node.outputs[1] or ins[0] is None or ins[0].dtype not in EIGHT_BIT \
                or outs[0].dtype != ins[0].dtype:
            return 0
        return 10 if _pool2d.usable(node, ins, outs, kinds="iu") is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        g = _pool2d.usable(node, ins, outs, kinds="iu")
        dtype = np.dtype(outs[0].dtype)
        pool = _nhwc.make_pool(g, tuple(ins[0].shape), dtype, np.maximum, np.iinfo(dtype).min)
        n, c, oh, ow = outs[0].shape

        def run(inputs, outputs):
            out = outputs[0] if outputs[0] is not None else np.empty((n, oh, ow, c), dtype)
            return (pool(inputs[0], out),) + (None,) * (len(outputs) - 1)

        return run


class AveragePoolNHWC(AveragePoolSeparable):
    """Channels last, 2-D, float, static: the native one-pass kernel for float32 (any dilation, see
    _pool_native), else separable window sums (see _nhwc) divided by the counts, (OH, OW, C) when windows
    differ. Either writes into a channel slice."""

    name = "nhwc"
    layout = "NHWC"
    strided_output = True
    make_pool = staticmethod(_nhwc.make_pool)

    def score(self, node, ins, outs) -> int:
        return 10 if _pool_native.geometry(node, ins, outs) is not None else super().score(node, ins, outs)

    def prepare(self, node, ins, outs) -> RunFn:
        g = _pool_native.geometry(node, ins, outs)
        if g is None:
            return super().prepare(node, ins, outs)
        kind = "avg_pad" if node.attrs.get("count_include_pad", 0) else "avg"
        pool = _pool_native.make_pool(g, tuple(ins[0].shape), kind)
        n, c, oh, ow = outs[0].shape

        def run(inputs, outputs):
            out = outputs[0] if outputs[0] is not None else np.empty((n, oh, ow, c), np.float32)
            return (pool(inputs[0], out),)

        run.bind = lambda inputs, outputs: pool.bind(inputs[0], outputs[0])
        return run


class GlobalAveragePoolNHWC(_nhwc.GlobalPool):
    """Channels last: np.mean over the pixels. Summing every channel in the same order matters: channels
    holding the same values get bit-identical means (the shipped SqueezeNet's 1000 logits are ~1e10 and
    equal; its softmax is uniform only while they stay equal). A BLAS vector-matrix product was ~2 us
    faster on 2048x7x7 but rounds columns differently."""

    op_type = "GlobalAveragePool"
    native_kind = "avg"

    @staticmethod
    def reduce(x, out):
        np.mean(x, axis=1, out=out)


class GlobalMaxPoolNHWC(_nhwc.GlobalPool):
    """Channels last: np.maximum.reduce over the pixels."""

    op_type = "GlobalMaxPool"
    native_kind = "max"

    @staticmethod
    def reduce(x, out):
        np.maximum.reduce(x, axis=1, out=out)


IMPLEMENTATIONS = (MaxPoolNHWC, MaxPoolNHWC8, AveragePoolNHWC, GlobalAveragePoolNHWC, GlobalMaxPoolNHWC)
