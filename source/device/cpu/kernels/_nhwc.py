"""Shared helpers of the channels-last (NHWC) pooling and normalization kernels.

With channels the contiguous axis every pass below is a ufunc call over
whole rows of channel vectors; none loops in Python over channels or pixels.

Pooling (``make_pool``) is separable: a reduction over the kh row taps
(stride sh) into a per-thread scratch (N, OH, W, C), then one over the kw
column taps (stride sw) into the output. Rows go first: a row tap is a whole
contiguous W*C block per output row, so the pass whose inner loops are only C
long (the column one) runs on the already row-strided, smaller array. No
padded copy of the input is made: each tap of an axis reads the input only
for the output positions where it lands inside it (``_Pass``): the first two
taps are combined on the range where both are inside, copied where one is,
and the fill (-inf for max, 0 for sums) written where none is; later taps
accumulate on their own range. That is the padded computation with the
padding terms dropped (x + 0 == x and max(x, -inf) == x): maxima equal the
NCHW separable kernel's bit for bit, sums may differ in the last bit (that
kernel adds columns first).

numpy's loops are slow when one operand repeats along the outer loop (a
per-channel vector against (pixels, C), a scalar exponent): such ufuncs run
through ``_blocks.blockwise`` over the flat array cut into rows of a repeated
block, so every inner loop is long and contiguous. BatchNormalization multiplies and adds its per-channel
vectors tiled into such blocks, and LRN raises to its exponent against a constant block. Even
so the blocked loop is slower per element than NCHW's per-plane scalar loop
on large planes: BatchNormalization on 512x28x28 takes 79 us against 155 us
NCHW, but on 64x112x112 155 us against 108 us (2-core benchmark machine).

LRN sums squares over a window of channels: the squares are written into a
scratch (pixels, C + size - 1) with zero columns around each pixel's
channels, so the window sums are size - 1 flat, contiguous shifted adds over
the whole buffer (each pixel's window stays inside its own padded row), in
the NCHW kernel's order; scale, bias and power run on that flat buffer too,
and only the final division reads the (pixels, C) view.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.hostkernels import _blocks, _scratch
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.base import Info

Index = tuple[slice, ...]
# channels a work unit of the native global pooling reduces (kernels.c NN_POOL_BLOCK)
GLOBAL_POOL_BLOCK = 64


def image(info: Info | None) -> bool:
    """True for a static 4-D floating point tensor."""
    return info is not None and info.static and len(info.shape) == 4 and info.dtype is not None \
        and info.dtype.kind == "f"


@dataclass(frozen=True)
class _Pass:
    """The ufunc calls of a windowed reduction along one axis of 4-D arrays.

    ``first``: (destination index, source indices) covering every output position once: two sources
    are reduced, one is copied, none means the fill. ``rest``: (destination index, source index) of
    the later taps, each accumulated into the destination.
    """

    first: tuple[tuple[Index, tuple[Index, ...]], ...]
    rest: tuple[tuple[Index, Index], ...]

    @staticmethod
    def plan(axis: int, size: int, out: int, kernel: int, stride: int, pad: int) -> "_Pass":
        """Output position o of tap j reads input position o * stride - pad + j, when in [0, size)."""
        lead = (slice(None),) * axis

        def inside(j: int) -> tuple[int, int]:
            lo = max(0, -((j - pad) // stride))
            return lo, max(lo, min(out, (size - 1 + pad - j) // stride + 1))

        def source(j: int, lo: int, hi: int) -> Index:
            start = lo * stride - pad + j
            return lead + (slice(start, start + (hi - lo - 1) * stride + 1, stride),)

        ranges = [inside(j) for j in range(kernel)]
        head = range(min(kernel, 2))
        cuts = sorted({0, out} | {min(e, out) for j in head for e in ranges[j]})
        first = []
        for a, b in zip(cuts, cuts[1:]):
            taps = [j for j in head if ranges[j][0] <= a and b <= ranges[j][1]]
            first.append((lead + (slice(a, b),), tuple(source(j, a, b) for j in taps)))
        rest = tuple((lead + (slice(lo, hi),), source(j, lo, hi))
                     for j, (lo, hi) in enumerate(ranges) if j >= 2 and lo < hi)
        return _Pass(tuple(first), rest)

    def run(self, ufunc: np.ufunc, fill: float, src: np.ndarray, dst: np.ndarray) -> None:
        for d, srcs in self.first:
            if len(srcs) == 2:
                ufunc(src[srcs[0]], src[srcs[1]], out=dst[d])
            elif srcs:
                np.copyto(dst[d], src[srcs[0]])
            else:
                dst[d] = fill
        for d, s in self.rest:
            view = dst[d]
            ufunc(view, src[s], out=view)


def make_pool(g: dict, shape: tuple[int, ...], dtype: np.dtype, ufunc: np.ufunc,
              fill: float) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """run(x, out): the windowed ``ufunc`` reduction of x (N, H, W, C) into out (N, OH, OW, C).

    ``g`` is the node's pool geometry (2-D, no dilation); ``shape`` the ONNX (N, C, H, W) input shape."""
    n, c, h, w = shape
    oh, ow = g["out"]
    rows = _Pass.plan(1, h, oh, g["kernel"][0], g["strides"][0], g["pads"][0])
    cols = _Pass.plan(2, w, ow, g["kernel"][1], g["strides"][1], g["pads"][1])
    part = ((n, oh, w, c), dtype)
    _scratch.reserve(_scratch.nbytes_of(part))

    def run(x: np.ndarray, out: np.ndarray) -> np.ndarray:
        r = _scratch.scratch(part)[0]
        rows.run(ufunc, fill, x, r)
        cols.run(ufunc, fill, r, out)
        return out

    return run


def make_lrn(pixels: int, channels: int, size: int, alpha: float, beta: float, bias: float,
             dtype: np.dtype) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """run(x, out): LRN of x (pixels, channels) into out (may be x), computed as the NCHW kernel does:
    x / (bias + alpha / size * sum of squares over channels c - (size - 1) // 2 ... c + size // 2) ** beta,
    the window summed in that order. The power runs against a block of beta (twice as fast as against
    the scalar); numpy's scalar-exponent loop special-cases some exponents (0.5, 1, 2, -1), for which the
    two can differ in the last bit."""
    before = (size - 1) // 2
    width = channels + size - 1
    parts = (((pixels, width), dtype), ((pixels, width), dtype))
    _scratch.reserve(_scratch.nbytes_of(*parts))
    # window sums are computed for the flat positions up to the last pixel's last channel
    span = pixels * width - (size - 1)
    t = np.dtype(dtype).type
    scale, offset, exponent = t(alpha / size), t(bias), _blocks.constant(beta, dtype)

    def run(x: np.ndarray, out: np.ndarray) -> np.ndarray:
        squares, sums = _scratch.scratch(*parts)
        squares[:, :before] = 0
        squares[:, before + channels:] = 0
        np.square(x, out=squares[:, before:before + channels])
        flat, acc = squares.reshape(-1), sums.reshape(-1)[:span]
        if size == 1:
            np.copyto(acc, flat)
        else:
            np.add(flat[:span], flat[1:span + 1], out=acc)
        for k in range(2, size):
            np.add(acc, flat[k:k + span], out=acc)
        np.multiply(acc, scale, out=acc)
        np.add(acc, offset, out=acc)
        _blocks.blockwise(np.power, acc, exponent, acc)
        return np.divide(x, sums[:, :channels], out=out)

    return run


class GlobalPool(Kernel):
    """Channels-last global pooling: ``reduce`` (a ufunc reduction) over the middle axis of the input seen
    as (N, H*W, C), into the (N, 1, 1, C) output. numpy reduces that axis row by row, so every channel is
    reduced in the same order, as the NCHW kernels do plane by plane. For float32 the native kernel
    (``native_kind``) takes the same steps in one pass, a block of channels at a time."""

    name = "nhwc"
    layout = "NHWC"
    native_kind: str = ""

    @staticmethod
    def reduce(x: np.ndarray, out: np.ndarray) -> None:
        raise NotImplementedError

    def score(self, node, ins, outs) -> int:
        return 10 if image(ins[0]) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        n, c, h, w = ins[0].shape
        dtype = outs[0].dtype
        reduce = self.reduce
        if native.available() and dtype == np.float32 and self.native_kind:
            kind = native.POOLS[self.native_kind]
            # the native kernel's work units: an image's block of GLOBAL_POOL_BLOCK channels, so a batch of one
            # splits over the pool too
            units = n * -(-c // GLOBAL_POOL_BLOCK)

            def run_native(inputs, outputs):
                x, out = inputs[0], outputs[0]
                if out is None or not out.flags.c_contiguous:
                    out = np.empty((n, 1, 1, c), dtype)
                x = np.ascontiguousarray(x)
                native.global_pool(x, out, kind, parallel.native_parts(x.size, units) if parallel.native_pool() else 1)
                return (out,)

            def bind(inputs, outputs):
                # NOTE: a planned step (straight.bind): the native call on the fixed buffers, split chosen once
                x, out = inputs[0], outputs[0]
                if x is None or out is None or x.dtype != dtype or out.dtype != dtype or x.shape != (n, h, w, c) \
                        or out.shape != (n, 1, 1, c) or not x.flags.c_contiguous or not out.flags.c_contiguous:
                    return None
                return partial(native.global_pool, x, out, kind,
                               parallel.native_parts(x.size, units) if parallel.native_pool() else 1)

            run_native.bind = bind
            return run_native

        def run(inputs, outputs):
            out = outputs[0] if outputs[0] is not None else np.empty((n, 1, 1, c), dtype)
            reduce(inputs[0].reshape(n, h * w, c), out.reshape(n, c))
            return (out,)

        return run
