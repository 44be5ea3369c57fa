"""Softmax on the cpu device, fast (float32/float64, static shape, softmax over one axis: the last, or with the
native kernels and float32 any one axis): per
cache-sized band of rows, exp(x - the band's max) in a scratch band, the row sums as one BLAS product with a
vector of ones, times their reciprocals into the output; a band with a row whose sum is tiny (its own maximum
far below the band's) or a non-finite maximum goes to the reference (hostkernels/op_softmax.py). Bands spread
over the cpu device's pool (parallel.py). float32 with the native kernels: native/nn_softmax.h, one row at a
time in L1 with its own maximum, rows split over the native pool; over a middle axis (a DFL head's Softmax over
the bins of (1, 4, bins, anchors)), the tensor viewed as (outer, n, inner) and each pass vectorized across
the contiguous inner columns, in place of the reference's transposing numpy path.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._io import planned_io
from nnhal.hostkernels._reduce import softmax
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator._reduce import softmax_axes

_F32 = np.dtype(np.float32)


class SoftmaxFast(Kernel):
    op_type = "Softmax"
    name = "fast"
    inplace = {0: 0}

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if x is None or x.dtype not in (np.float32, np.float64) or x.shape is None or not x.static or not x.shape:
            return 0
        if 0 in x.shape:
            return 0
        axes = softmax_axes(node, len(x.shape))
        if axes == (len(x.shape) - 1,):
            return 10
        # NOTE: a middle axis has the native column kernel only (no numpy band path): float32 with native
        return 10 if len(axes) == 1 and x.dtype == np.float32 and native.available() else 0

    def prepare(self, node, ins, outs) -> RunFn:
        shape, dtype = tuple(ins[0].shape), ins[0].dtype
        (axis,) = softmax_axes(node, len(shape))
        if axis != len(shape) - 1:
            return self._prepare_middle(shape, axis)
        width = shape[-1]
        # NOTE: rows per band: 2^17 elements (512 KB of float32) stay in L2 across the passes; 4x larger
        # than the former 2^15 and a per-band maximum (read while the band comes into cache, not one
        # more pass over the tensor) measured 1.51 -> 1.35 ms on (1, 6, 500, 500) and 5.2 -> 3.9 ms on
        # (8, 12, 197, 197) at 2 threads
        band = max(1, (1 << 17) // max(1, width))
        ones = np.ones(width, dtype)       # row sums as a BLAS product: 0.13 ms against einsum's 0.30
        # exp(x - band max) keeps full precision while a row's own maximum is above e^-60 of it
        tiny = dtype.type(np.exp(-60.0))
        use_native = dtype == np.float32 and native.available()

        def run(inputs, outputs):
            x = inputs[0]
            given = outputs[0]
            y = given if given is not None and given.flags.c_contiguous else np.empty(shape, dtype)
            # y is contiguous, so y2 is a view; x2 may be a copy of a strided x. y may alias x: each band
            # is read into tmp before its rows of y are written.
            x2, y2 = x.reshape(-1, width), y.reshape(-1, width)
            rows = y2.shape[0]

            def bands(r0: int, r1: int) -> None:
                tmp = np.empty((min(r1 - r0, band), width), dtype)
                for i in range(r0, r1, band):
                    j = min(r1, i + band)
                    xb, tb = x2[i:j], tmp[:j - i]
                    top = xb.max()
                    if not np.isfinite(top):
                        y2[i:j] = softmax(xb, (1,))
                        continue
                    np.subtract(xb, top, out=tb)
                    np.exp(tb, out=tb)
                    sums = np.matmul(tb, ones)
                    if sums.min() < tiny:
                        # rows far below the band's maximum: this band with each row's own maximum
                        y2[i:j] = softmax(xb, (1,))
                    else:
                        np.reciprocal(sums, out=sums)
                        np.multiply(tb, sums[:, None], out=y2[i:j])

            if use_native:
                x2 = x2 if x2.flags.c_contiguous else np.ascontiguousarray(x2)
                native.softmax(x2, y2, 1, parallel.native_parts(x2.size * 4, rows) if parallel.native_pool() else 1)
            else:
                parallel.for_ranges(rows, x2.size * 8, bands, band)
            if given is not None and given is not y:
                np.copyto(given, y)
                y = given
            return (y,)

        def bind(inputs, outputs):
            # NOTE: a planned step (straight.bind): the native call on the fixed views, split chosen once
            if not use_native or not planned_io(inputs, outputs, shape, shape, _F32):
                return None
            x, y = inputs[0], outputs[0]
            x2, y2 = x.reshape(-1, width), y.reshape(-1, width)
            parts = parallel.native_parts(x2.size * 4, x2.shape[0]) if parallel.native_pool() else 1
            return partial(native.softmax, x2, y2, 1, parts)

        run.bind = bind
        return run

    @staticmethod
    def _prepare_middle(shape: tuple[int, ...], axis: int) -> RunFn:
        """The run of a float32 Softmax over axis ``axis`` (not the last): native, by columns."""
        n, inner = shape[axis], int(np.prod(shape[axis + 1:]))
        # NOTE: trailing axes of size 1 (inner 1) make it a softmax over the last axis of (-1, n)
        view = (-1, n, inner) if inner > 1 else (-1, n)
        size = int(np.prod(shape))

        def run(inputs, outputs):
            x = np.ascontiguousarray(inputs[0]).reshape(view)
            given = outputs[0]
            y = given if given is not None and given.flags.c_contiguous else np.empty(shape, np.float32)
            parts = parallel.native_parts(size * 4, x.shape[0] * inner) if parallel.native_pool() else 1
            native.softmax(x, y.reshape(view), inner, parts)
            if given is not None and given is not y:
                np.copyto(given, y)
                y = given
            return (y,)

        def bind(inputs, outputs):
            if not planned_io(inputs, outputs, shape, shape, _F32):
                return None
            x, y = inputs[0].reshape(view), outputs[0]
            parts = parallel.native_parts(size * 4, x.shape[0] * inner) if parallel.native_pool() else 1
            return partial(native.softmax, x, y.reshape(view), inner, parts)

        run.bind = bind
        return run


IMPLEMENTATIONS = (SoftmaxFast,)
