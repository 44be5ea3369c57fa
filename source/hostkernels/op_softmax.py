"""Softmax on the CPU.

reference: the shared stable softmax. fast (float32/float64, static shape,
softmax over the last axis only): exp(x - global max) in cache-sized bands of
rows in the output buffer, divided by the row sums; rows whose sum is tiny (their
own maximum far below the global one) are redone with their own maximum, and a
non-finite maximum sends the whole tensor to the reference.
"""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._reduce import SoftmaxFamilyKernel, softmax
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator._reduce import softmax_axes


class SoftmaxKernel(SoftmaxFamilyKernel):
    op_type = "Softmax"
    function = softmax


def _reference(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    y = softmax(x, (x.ndim - 1,))
    if out is None:
        return (y,)
    np.copyto(out, y)
    return (out,)


class SoftmaxFast(Kernel):
    op_type = "Softmax"
    name = "fast"
    inplace = {0: 0}

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if x is None or x.dtype not in (np.float32, np.float64) or x.shape is None or not x.static or not x.shape:
            return 0
        if 0 in x.shape or softmax_axes(node, len(x.shape)) != (len(x.shape) - 1,):
            return 0
        return 10

    def prepare(self, node, ins, outs) -> RunFn:
        shape, dtype = tuple(ins[0].shape), ins[0].dtype
        width = shape[-1]
        band = max(1, (1 << 15) // max(1, width))   # rows per band: the passes stay in cache
        # exp(x - global max) keeps full precision while a row's own maximum is above e^-60 of it
        tiny = dtype.type(np.exp(-60.0))

        def run(inputs, outputs):
            x = inputs[0]
            top = np.max(x)
            if not np.isfinite(top):
                return _reference(x, outputs[0])
            given = outputs[0]
            y = given if given is not None and given.flags.c_contiguous else np.empty(shape, dtype)
            # y is contiguous, so y2 is a view; x2 may be a copy of a strided x (then y cannot alias x)
            x2, y2 = x.reshape(-1, width), y.reshape(-1, width)
            rows = y2.shape[0]
            tmp = np.empty((min(rows, band), width), dtype)
            for i in range(0, rows, band):
                j = min(rows, i + band)
                xb, tb = x2[i:j], tmp[:j - i]
                np.subtract(xb, top, out=tb)
                np.exp(tb, out=tb)
                sums = np.einsum("ij->i", tb)
                if sums.min() < tiny:
                    # rows far below the global maximum: this band with each row's own maximum
                    y2[i:j] = softmax(xb, (1,))
                else:
                    np.divide(tb, sums[:, None], out=y2[i:j])
            if given is not None and given is not y:
                np.copyto(given, y)
                y = given
            return (y,)

        return run


IMPLEMENTATIONS = (SoftmaxKernel, SoftmaxFast)
