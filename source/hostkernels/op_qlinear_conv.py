"""QLinearConv on the CPU: exact integer convolution, bias, per-channel requantization."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._qrc import channel_param, integer_conv, saturate, shifted, weight_zero
from nnhal.hostkernels.base import FunctionKernel, Kernel, RunFn, store
from nnhal.hostkernels.windows import im2col
from nnhal.operator.table import get_prototype


class QLinearConvKernel(FunctionKernel):
    op_type = "QLinearConv"
    name = "reference"

    def compute(self, node, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias=None):
        acc = integer_conv(node, shifted(x, x_zero), shifted(w, weight_zero(w_zero, w.ndim)))
        if bias is not None:
            acc += channel_param(bias.astype(np.float64), acc.ndim)
        # NOTE: the rescale is computed in float32, as onnxruntime does, so pre-quantized models match
        # it bit for bit; the accumulator itself is exact (float64 holds every int32 sum).
        factor = (np.asarray(x_scale, np.float32).reshape(()) * channel_param(np.asarray(w_scale, np.float32), acc.ndim)
                  / np.asarray(y_scale, np.float32).reshape(()))
        y = acc.astype(np.float32) * factor.astype(np.float32)
        return saturate(np.rint(y) + np.asarray(y_zero, np.float32), y_zero.dtype)


class PackedQLinearConv(Kernel):
    """Constant weights shifted and packed at prepare; the GEMM in float32 when every partial sum
    provably stays below 2^24 (exact), else float64; the same float32 rescale as the reference."""

    op_type = "QLinearConv"
    # the matrix product; the cpu device's subclass runs it on its pool (device/cpu/kernels/_pooled.py)
    matmul = staticmethod(np.matmul)
    name = "packed"

    def score(self, node, ins, outs) -> int:
        needed = (1, 2, 3, 4, 5, 6, 7)
        return 2 if all(ins[i] is not None and ins[i].value is not None for i in needed) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        w = ins[3].value
        group = node.attrs["group"]
        shifted_w = shifted(w, weight_zero(ins[5].value, w.ndim))
        k = int(np.prod(w.shape[1:]))
        x_span = 255.0
        exact32 = k * x_span * float(np.abs(shifted_w).max(initial=0.0)) < 2 ** 24
        gemm = np.float32 if exact32 else np.float64
        packed = shifted_w.reshape(group, w.shape[0] // group, -1).astype(gemm)
        rank = len(ins[0].shape) if ins[0].shape is not None else w.ndim
        w_scale = channel_param(np.asarray(ins[4].value, np.float32), rank)
        factor = (np.asarray(ins[1].value, np.float32).reshape(()) * w_scale
                  / np.asarray(ins[6].value, np.float32).reshape(())).astype(np.float32)
        y_zero = ins[7].value
        zero = np.asarray(y_zero, np.float32)
        x_zero = gemm(np.asarray(ins[2].value).reshape(()))
        geometry = get_prototype("", "Conv").geometry

        def run(inputs, outputs):
            x = inputs[0]
            geo = geometry(node, x.shape, w.shape)
            xs = x.astype(gemm) - x_zero
            win, out_sizes = im2col(xs, geo["kernel"], geo["strides"], geo["dilations"], geo["pads"])
            nb, n = x.shape[0], len(out_sizes)
            perm = (0, 1, *range(2 + n, 2 + 2 * n), *range(2, 2 + n))
            cols = np.ascontiguousarray(win.transpose(perm)).reshape(nb, group, -1, int(np.prod(out_sizes)))
            acc = self.matmul(packed[None], cols).reshape(nb, w.shape[0], *out_sizes).astype(np.float64)
            if len(inputs) > 8 and inputs[8] is not None:
                acc += channel_param(inputs[8].astype(np.float64), acc.ndim)
            y = acc.astype(np.float32) * factor
            return (store(saturate(np.rint(y) + zero, y_zero.dtype), outputs[0]),)

        return run


IMPLEMENTATIONS = (QLinearConvKernel, PackedQLinearConv)
