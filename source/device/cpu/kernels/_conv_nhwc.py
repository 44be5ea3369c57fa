"""Conv on the CPU in channels-last layout (NHWC): the 2-D kernels the CPU layout pass runs on.

Input 0 arrives as (N, H, W, C) and output 0 is written as (N, OH, OW, M); prepare still sees the ONNX
(NCHW) shapes and packs the constant weights once. With channels contiguous every gather copies runs of
C (kw * C for a group-1 kernel row) elements where NCHW copies runs of at most OW, and a band of output
rows is one contiguous block of the output, so bias and activation run on contiguous memory right after
its GEMM. Bands hold several whole images when one image fits the scratch bound (one GEMM over them
all: small maps at batch > 1), else output rows of one image.

nhwc-gemm (2-D, constant weights, static shapes; the acceptance of _conv2d.geometry):
depthwise convolutions (one input channel per group, any channel multiplier) accumulate one multiply and
add per kernel tap over all pixels and channels at once; 1x1 ones are one GEMM (N*H*W, C) @ (C, M)
straight from the input into the output (a strided copy first when strided; grouped ones one GEMM
batched over groups on strided views); the rest gather im2col columns (output pixels x kh*kw*C/G,
channels fastest) with one copy of a strided window view of the padded input per band and run one GEMM
(batched over groups) per band into the output's rows; a few outputs over a deep window (a
cross-correlation's template) are one GEMM of the padded input by the weights of all taps, summed
shifted (nhwc_shift). Groups of fewer than GROUP_MAX_RUN channels are merged into super-groups of at
most GROUP_MAX_RUN channels with block-diagonal weights, trading GEMM work for longer copy runs.

nhwc-dynamic: the same paths for weights (and bias) that are run-time tensors (Siamese trackers'
cross-correlations, dynamic filters), packed every run (ConvDynamicNHWC; conv.ConvDynamic where the Conv
stays NCHW).

nhwc-winograd: 3x3 stride-1 group-1 convolutions with enough channels on large enough maps
(WINOGRAD_MIN_OUT) by Winograd F(4x4, 3x3), as op_conv.ConvWinograd but channels last: the 6x6 input
tiles are gathered as (36, tiles, C) by one strided copy, each transform is one GEMM over all tiles and
channels, the 36 points one batched GEMM (36, tiles, C) @ (36, C, M), and the 4x4 output tiles are
scattered into the output by one strided copy (through scratch when edge tiles are cropped).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels import _gates
from nnhal.device.cpu.native import direct_conv
from nnhal.errors import ShapeError, where
from nnhal.graph.node import Node
from nnhal.hostkernels import _conv2d, _scratch
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.fused import Activation, activation_of
from nnhal.operator.base import Info

_F32 = np.dtype(np.float32)
# scratch bound of one band of im2col columns (bytes); the GEMM packs the weights once a band, so smaller
# bands lose (128->128 3x3 stride 2 at 56x56: 907 us in 1 MB bands, 751 in 4 MB)
BAND_BYTES = 4 << 20
# longest run of channels (C/G times groups per super-group) the grouped im2col gathers, taken as the largest
# whole number of groups within it; ResNeXt's 128 channels in 32 groups at 56x56 (us at 2 threads, runs of
# 4 / 8 / 16 / 32 / 64 / 128): 4784 / 2964 / 2005 / 1785 / 1989 / 2873.
# NOTE: a bound from above, not below: RegNetY-400MF's 8-channel groups come 6, 13, 26 and 55 to a
# convolution, and the smallest run of at least 32 channels made super-groups of 48, 104 (13x the GEMM
# work), 104 and 40 channels; at most 32 makes them 24, 8, 16 and 8 (us at 1 thread, 3x3: 104 channels
# at 28x28 1655 -> 758, 208 at 14x14 876 -> 284, 48 at 56x56 stride 2 1663 -> 1420)
GROUP_MAX_RUN = 32
# im2col rows of group-1 convolutions are padded to a multiple of this many elements (aligned BLAS rows)
ALIGN_COLUMNS = 8
# scratch bound of a depthwise convolution's temporary (bytes, one band of output rows); smaller bands that
# stay in L2 were measured no faster (144 channels at 56x56: 873 us in 256 KB bands, 894 unbanded)
DEPTHWISE_BAND_BYTES = 1 << 20
# scratch bound of one band of Winograd tile rows (bytes, per transformed tensor); the 36 products pack U
# once a band (128 channels at 56x56: 2200 us in 1 MB bands, 1704 in 4 MB)
WINOGRAD_BAND_BYTES = 4 << 20
# smallest output side (min(OH, OW)) where nhwc-winograd beats nhwc-gemm, by the smallest channel count
# (min(C, M)) reached; none below. Measured at 2 threads, batch 1 (gemm against winograd, us): 128->128 at
# 17x17 347 against 329, at 14x14 212 against 221 (256 at 14x14: 759 against 825); 64 at 24x24 184 against
# 164, at 17x17 110 against 140; 48 at 28x28 172 against 161, at 24x24 131 against 135; 32 at 56x56 360
# against 289, at 42x42 220 against 219 (24 at 56x56: 282 against 253); at 28x28 with 32 channels on
# one side (DenseNet's 128->32: 278 against 220; 64->32 157 against 139; 32->32 105 against 99).
# Those were the numpy transforms. With the native ones (native/nn_winograd.h) 48 channels and more win from
# 12x12 up, against the GEMM or the direct kernel, whichever the plan took (issue 27; 2 threads, batch 1, min of
# 60 alternating blocks in one process, loaded 2-core Zen 3 VM, us, GEMM or direct against Winograd): 128->128 at
# 12x12 649 / 499, 96->96 at 14x14 351 / 332, at 16x16 465 / 308, 192->96 at 16x16 1813 / 394, 64->64 at 14x14
# 205 / 182, 48->48 at 20x20 251 / 184, at 28x28 424 / 299, at 32x32 461 / 343; 64->128 at 12x12 ties (236 / 240),
# at 8x8 and below the tiles' padding loses (192->192 at 8x8 402 / 425; at 1 thread 192->192 at 7x7 605 / 770,
# 128->128 at 6x6 185 / 269).
WINOGRAD_MIN_OUT = {48: 12, 32: 28, 24: 56}
# input channels up to which the direct kernel reads a channels-first input in place instead of after a conversion
# pass (its NCHW reads take the per-tap loop, not the one run of KW * C elements a kernel row; an image's 3 colour
# planes are the case it is for)
DIRECT_NCHW_MAX_C = 8


def bias_of(ins: list[Info | None]) -> np.ndarray | None:
    """The constant bias of a Conv node (input 2), or None when it has none."""
    return ins[2].value if len(ins) > 2 and ins[2] is not None else None


def _epilogue(bias_value: np.ndarray | None, act: Activation | None, dtype: np.dtype, row: int) \
        -> Callable[[np.ndarray], None]:
    """finish(block): bias and the fused activation in place in a block of whole output rows (``row``
    elements each: OW * M); the bias is tiled to a row so the add runs over long rows. A block that is a
    channel slice of a wider tensor (pixels further apart than M, see strided_output_for) gets the bias
    per pixel through its own strides."""
    bias = value = None
    if bias_value is not None:
        value = np.asarray(bias_value).astype(dtype)
        bias = np.tile(value, row // value.size)

    def finish(block: np.ndarray) -> None:
        if not block.flags.c_contiguous:
            if value is not None:
                np.add(block, value, out=block)
            _gates.apply_activation(block, act)
            return
        if bias is not None:
            rows = block.reshape(-1, row)
            np.add(rows, bias, out=rows)
        _gates.apply_activation(block, act)

    return finish


def pixel_rows(y: np.ndarray | None, shape: tuple[int, int, int, int], dtype) -> tuple[np.ndarray, np.ndarray]:
    """The output (N, OH, OW, M) to write and its (N * OH * OW, M) pixel rows as a view of it: the planned
    output when its pixels are evenly spaced with unit stride on channels (C-contiguous, or a channel slice
    of a wider channels-last tensor), else a new array (the plan copies a result it did not hand out)."""
    n, oh, ow, m = shape
    if y is not None and y.dtype == dtype and y.shape == shape and (y.size == 0 or y.strides[3] == y.itemsize):
        rows = y.reshape(n * oh * ow, m)
        if rows.size == 0 or np.may_share_memory(rows, y):
            return y, rows
    y = np.empty(shape, dtype)
    return y, y.reshape(n * oh * ow, m)


def fixed_input(x: np.ndarray | None, shape: tuple) -> bool:
    """Whether a bound step (straight.bind) may hand ``x`` to its native call as it lies: C-contiguous float32 of
    the static ``shape`` (else the plain run's per-run copy would be needed; a bound call never reads a snapshot)."""
    return x is not None and x.dtype == _F32 and x.shape == shape and x.flags.c_contiguous


def fixed_output(y: np.ndarray | None, shape: tuple, strided: bool) -> bool:
    """Whether a bound step may write the planned float32 output ``y`` of ``shape`` in place: C-contiguous, or with
    ``strided`` a channel slice of a wider channels-last tensor (pixel_rows takes it as it is)."""
    if y is None:
        return False
    if strided:
        return pixel_rows(y, shape, _F32)[0] is y
    return y.dtype == _F32 and y.shape == shape and y.flags.c_contiguous


def _bands(n: int, rows: int, row_bytes: int, budget: int) -> tuple[int, int, list[tuple[int, int, int, int]]]:
    """Bands (b0, b1, r0, r1) of images b0:b1 and rows r0:r1 of an (n, rows) output whose scratch takes
    ``row_bytes`` a row: several whole images a band when one fits the budget (one GEMM over them all), else
    bands of rows of one image (at least one row). Also the most images and rows a band holds. Every band
    is a contiguous block of an (N, rows, ...) array."""
    per = max(1, budget // row_bytes)
    if per >= rows:
        imgs = min(n, per // rows)
        return imgs, rows, [(b0, min(n, b0 + imgs), 0, rows) for b0 in range(0, n, imgs)]
    return 1, per, [(b, b + 1, r0, min(rows, r0 + per)) for b in range(n) for r0 in range(0, rows, per)]


class _Split:
    """The bands of a banded kernel spread over the Python pool's threads when the native pool is off
    (with it, the bands run in turn and their GEMMs split): each thread runs a contiguous group of
    bands with its own scratch. When there are fewer bands than threads the work is cut into smaller
    bands (of about 1/threads of the whole), made once per thread count."""

    def __init__(self, bands: list, n: int, rows: int, row_bytes: int, budget: int, work: int) -> None:
        self.bands, self.n, self.rows, self.row_bytes, self.budget, self.work = bands, n, rows, row_bytes, budget, work
        self._finer: dict[int, list] = {}

    def groups(self, threads: int) -> list[list]:
        if parallel.native_pool():
            # each band's GEMMs split over the native pool (parallel.matmul); Python threads over bands
            # on top would run three threads on two cores (VGG19 at batch 8: 1.15 s -> 2.09 s)
            return [self.bands]
        parts = parallel.parts_for(self.work, self.n * self.rows, threads)
        if parts <= 1:
            return [self.bands]
        bands = self.bands
        if len(bands) < parts:
            bands = self._finer.get(parts)
            if bands is None:
                share = -(-self.n * self.rows * self.row_bytes // parts)
                bands = self._finer[parts] = _bands(self.n, self.rows, self.row_bytes, min(self.budget, share))[2]
        return [bands[a:b] for a, b in parallel.ranges(len(bands), min(parts, len(bands)))]

    def run(self, fn: Callable[[list], None]) -> None:
        groups = self.groups(parallel.threads())
        if len(groups) == 1:
            fn(groups[0])
        else:
            parallel.run_parts([lambda g=g: fn(g) for g in groups])


def nhwc_depthwise(s: _conv2d.Conv2d, wv: np.ndarray, finish: Callable[[np.ndarray], None]) -> RunFn:
    """One input channel per group, any channel multiplier: one multiply and add per kernel tap over
    all pixels and channels of a band at once."""
    dtype, pads, padded = s.dtype, s.pads, s.padded
    n, c, m, mg, oh, ow, hp, wpad = s.n, s.c, s.m, s.mg, s.oh, s.ow, s.hp, s.wp
    (kh, kw), (sh, sw), (dh, dw) = s.kernel, s.strides, s.dilations
    out_shape = (n, oh, ow, m)
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    # a channel multiplier k > 1 repeats each input channel k times in the padded scratch (k strided
    # copies), so output channel o always reads scratch channel o
    mult = mg
    wd = np.ascontiguousarray(wv.reshape(m, kh * kw).T)                          # (taps, M)
    if sw == 1:
        # a tap's window rows are OW * M contiguous elements: weights tiled to a row, one long inner loop
        wd = np.tile(wd, (1, ow))                                                 # (taps, OW * M)
    repeated = padded or mult > 1
    imgs, rows, bands = _bands(n, oh, ow * m * dtype.itemsize, DEPTHWISE_BAND_BYTES)
    parts = ([((imgs, hp, wpad, m), dtype)] if repeated else []) + [((imgs * rows * ow * m,), dtype)]
    _scratch.reserve(_scratch.nbytes_of(*parts))

    def run_dw(inputs, outputs):
        x = inputs[0]
        y = outputs[0] if outputs[0] is not None else np.empty(out_shape, dtype)
        bufs = _scratch.scratch(*parts)
        for b0, b1, r0, r1 in bands:
            nb, nr = b1 - b0, r1 - r0
            xb = x[b0:b1]
            if repeated:
                if r0 == 0:
                    for copy in range(mult):
                        _conv2d.pad_into(bufs[0][:nb].reshape(nb, hp, wpad, c, mult)[..., copy], xb, pads, True)
                xb = bufs[0][:nb]
            yb = y[b0:b1, r0:r1]
            if sw == 1:
                yb = yb.reshape(nb, nr, ow * m)
            tmp = bufs[-1][:yb.size].reshape(yb.shape)
            for k, (i, j) in enumerate(taps):
                top, left = i * dh + r0 * sh, j * dw
                src = xb[:, top:top + (nr - 1) * sh + 1:sh, left:left + (ow - 1) * sw + 1:sw]
                if sw == 1:
                    src = src.reshape(nb, nr, ow * m)
                if k == 0:
                    np.multiply(src, wd[k], out=yb)
                else:
                    np.multiply(src, wd[k], out=tmp)
                    np.add(yb, tmp, out=yb)
            finish(y[b0:b1, r0:r1])
        return (y,)

    return run_dw


def act_record(act: Activation | None):
    """The native kernels' record of a fused activation (None: no activation)."""
    if act is None:
        return native.make_act(None)
    return native.make_act(act.kind, None if act.lo is None else float(act.lo),
                           None if act.hi is None else float(act.hi), act.alpha, act.beta)


# groups of at most this many input channels run on the native grouped kernel (when their output
# channels are a multiple of 8); wider groups keep the im2col GEMM. Measured at 1 thread, 3x3, batch 1, interleaved
# min of 32 in one process on the 2-core Zen 3 VM (us, grouped / im2col): 16 a group: 64 in 4 groups at 28^2
# 310 / 797, 128 in 8 at 28^2 641 / 1629; 32 a group: 256 in 8 at 14^2 653 / 861, 512 in 16 at 7^2 311 / 428,
# 64 in 2 at 56^2 2526 / 3367; 64 a group: 256 in 4 at 14^2 1495 / 1179, 128 in 2 at 28^2 2201 / 2279.
NATIVE_GROUP_MAX_CG = 32
# the native grouped kernel's bounds (nn_gconv.h: its row of zeros, its table of tap sources)
NATIVE_GROUP_MAX_C = 4096
NATIVE_GROUP_MAX_TAPS = 64


def native_grouped_fits(s: _conv2d.Conv2d) -> bool:
    """Whether native_grouped takes the convolution (see there)."""
    return native.available() and s.dtype == np.float32 and s.group != 1 and s.cg != 1 \
        and s.cg <= NATIVE_GROUP_MAX_CG and s.mg % 8 == 0 and s.c <= NATIVE_GROUP_MAX_C \
        and s.kernel[0] * s.kernel[1] <= NATIVE_GROUP_MAX_TAPS


def native_grouped(s: _conv2d.Conv2d, wv: np.ndarray, bias: np.ndarray | None, act: Activation | None) \
        -> RunFn | None:
    """The native grouped convolution (nn_gconv.h nn_gconv_nhwc_f32: tiles of 8 pixels times 8 of a group's
    outputs in registers over its taps and channels, no im2col, no zeros multiplied), split by output rows over the
    native pool; None when it does not apply (not built, another dtype, wide groups, MG not a multiple
    of 8): the im2col super-groups run it."""
    if not native_grouped_fits(s):
        return None
    (kh, kw), (sh, sw), (dh, dw) = s.kernel, s.strides, s.dilations
    wk = np.ascontiguousarray(wv.reshape(s.group, s.mg, s.cg, kh, kw).transpose(0, 3, 4, 2, 1), dtype=np.float32)
    b = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    conv = native.Conv("grouped", (s.n, s.h, s.w, s.c, s.oh, s.ow, s.m, kh, kw, sh, sw, dh, dw, s.pads[0],
                                   s.pads[1], s.group, s.cg, s.mg), wk, b, act_record(act))
    work = parallel.gemm_work(s.n * s.oh * s.ow * s.m * s.cg * kh * kw) * 4
    return _native_rows_run(s, work, conv)


def _native_rows_run(s: _conv2d.Conv2d, work: int, conv, strided: bool = False) -> RunFn:
    """The run of a prepared native convolution (native.Conv) split by output rows: a C-contiguous float32
    input, a contiguous output (the planned one, else a new array), parts for the native pool. ``strided``:
    the kernel also writes a channel slice of a wider tensor (pixel_rows; the direct kernel)."""
    out_shape, rows, in_shape = (s.n, s.oh, s.ow, s.m), s.n * s.oh, (s.n, s.h, s.w, s.c)
    call = conv.run
    # NOTE: the planned output last found writable in place (pixel_rows' checks, ~1 us of Python, once per
    # output buffer: the plan hands the same one every run; an array's shape and strides never change)
    last: list = [None]

    def run_native(inputs, outputs):
        x = inputs[0]
        if not x.flags.c_contiguous or x.dtype != np.float32:
            x = np.ascontiguousarray(x, dtype=np.float32)
        y = outputs[0]
        if strided and (y is None or y is not last[0]):
            planned = y
            y = pixel_rows(y, out_shape, np.float32)[0]
            if y is planned:
                last[0] = y
        elif not strided and (y is None or not y.flags.c_contiguous):
            y = np.empty(out_shape, np.float32)
        call(x, y, None, parallel.native_parts(work, rows) if parallel.native_pool() else 1)
        return (y,)

    def bind(inputs, outputs):
        # NOTE: a planned step (straight.bind): the prepared native call on the fixed buffers, split chosen once
        x, y = inputs[0], outputs[0]
        if not fixed_input(x, in_shape) or not fixed_output(y, out_shape, strided):
            return None
        return partial(call, x, y, None, parallel.native_parts(work, rows) if parallel.native_pool() else 1)

    run_native.bind = bind
    return run_native


def native_depthwise(s: _conv2d.Conv2d, wv: np.ndarray, bias: np.ndarray | None, act: Activation | None) \
        -> RunFn | None:
    """The native kernel's depthwise convolution (float32, channel multiplier 1): every tap, the bias and
    the activation in one pass over the output; None when it does not apply
    (not built, NNHAL_NATIVE=0, another dtype or multiplier): nhwc_depthwise runs it in numpy."""
    if not native.available() or s.dtype != np.float32 or s.mg != 1:
        return None
    (kh, kw), (sh, sw), (dh, dw) = s.kernel, s.strides, s.dilations
    wk = np.ascontiguousarray(wv.reshape(s.m, kh, kw).transpose(1, 2, 0), dtype=np.float32)   # (KH, KW, C)
    b = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    conv = native.Conv("depthwise", (s.n, s.h, s.w, s.c, s.oh, s.ow, kh, kw, sh, sw, dh, dw, s.pads[0], s.pads[1]),
                       wk, b, act_record(act))
    # a tap's multiply-add over a channel vector runs about as fast as a copied element
    work = s.n * s.oh * s.ow * s.m * kh * kw // 4
    return _native_rows_run(s, work, conv)


def nhwc_1x1(s: _conv2d.Conv2d, wv: np.ndarray, finish: Callable[[np.ndarray], None],
             bias: np.ndarray | None = None, act: Activation | None = None) -> RunFn:
    """Unpadded 1x1: one GEMM (N*H*W, C) @ (C, M) straight from the input into the output (a strided copy
    first when strided; grouped ones one GEMM batched over groups on strided views). Group 1 in float32
    goes to the native pool (parallel.gemm): each thread its rows' GEMM, bias and activation."""
    dtype, n, c, m, group, cg, mg, oh, ow = s.dtype, s.n, s.c, s.m, s.group, s.cg, s.mg, s.oh, s.ow
    sh, sw = s.strides
    out_shape = (n, oh, ow, m)
    p = n * oh * ow
    wt = np.ascontiguousarray(wv.reshape(group, mg, cg).transpose(0, 2, 1))    # (G, C/G, M/G)
    strided = (sh, sw) != (1, 1)
    work = parallel.gemm_work(p * c * mg) + p * m           # the GEMM, then the epilogue over the output
    parts = [((n, oh, ow, c), dtype)] if strided else []
    _scratch.reserve(_scratch.nbytes_of(*parts))
    native_ok = group == 1 and dtype == np.float32
    record = act_record(act) if native_ok else None
    bias32 = None if bias is None or not native_ok else np.ascontiguousarray(bias, dtype=np.float32)
    # NOTE: a pointwise convolution of a mobile CNN is a few microseconds of GEMM, and the general path's checks
    # (pixel_rows, parallel.gemm's matrix checks and split) took ~6 us of Python a call (shufflenet_v2 has 36):
    # the weights, bias and activation are prepared once (native.Gemm), the split once per thread count, and the
    # pixel rows of the planned output once per output buffer (the plan hands the same one every run)
    fast = native_ok and not strided and native.available()
    prepared = native.Gemm(np.ascontiguousarray(wt[0], dtype=np.float32), bias32, record) if fast else None
    splits: dict[int, tuple[int, bool] | None] = {}
    in_shape = (n, s.h, s.w, c)
    last: list = [None]                     # (output buffer, its pixel rows), replaced as one tuple

    def run_1x1(inputs, outputs):
        x, out = inputs[0], outputs[0]
        if prepared is not None and out is not None and x.dtype == _F32 and x.shape == in_shape \
                and x.flags.c_contiguous and parallel.native_pool():
            memo = last[0]
            if memo is None or memo[0] is not out:
                y0, rows0 = pixel_rows(out, out_shape, dtype)
                memo = (out, rows0) if y0 is out else None
                if memo is not None:
                    last[0] = memo
            t = parallel.threads()
            if t not in splits:
                splits[t] = parallel.gemm_split(p, c, m, bias32 is not None or act is not None, parallel.PIXEL_ALIGN)
            split = splits[t]
            if memo is not None and split is not None:
                prepared.run(x.reshape(p, c), memo[1], split[0], parallel.PIXEL_ALIGN, split[1])
                return (out,)
        y, yf = pixel_rows(outputs[0], out_shape, dtype)
        if strided:
            (xs,) = _scratch.scratch(*parts)
            np.copyto(xs, x[:, :(oh - 1) * sh + 1:sh, :(ow - 1) * sw + 1:sw])
            x = xs
        xf = x.reshape(p, c)
        if native_ok and parallel.gemm(xf, wt[0], yf, bias32, record, parallel.PIXEL_ALIGN):
            return (y,)
        if group > 1 and parallel.native_pool():
            # the groups' GEMMs as one stack on the native pool (split over all rows), then the epilogue
            parallel.matmul(xf.reshape(p, group, cg).transpose(1, 0, 2), wt,
                            out=yf.reshape(p, group, mg).transpose(1, 0, 2))
            finish(y)
            return (y,)

        def part(r0: int, r1: int) -> None:
            # output rows r0:r1 (OW pixels each): their GEMM, then bias and activation while in cache
            a, b = r0 * ow, r1 * ow
            if group == 1:
                parallel.matmul(xf[a:b], wt[0], out=yf[a:b])
            else:
                # group g's pixels x channels are a (P, C/G) matrix with row stride C: BLAS reads it in place
                parallel.matmul(xf[a:b].reshape(b - a, group, cg).transpose(1, 0, 2), wt,
                          out=yf[a:b].reshape(b - a, group, mg).transpose(1, 0, 2))
            finish(yf[a:b])

        parallel.for_ranges(n * oh, work, part)
        return (y,)

    def bind(inputs, outputs):
        # NOTE: a planned step (straight.bind): the prepared GEMM on the fixed pixel rows, its split chosen once
        # (what run_1x1's fast path checks and looks up per call); with the pools off the plain run hands the
        # product to numpy (BLAS's own threads), so the bind declines
        x, y = inputs[0], outputs[0]
        if prepared is None or not parallel.native_pool() or not fixed_input(x, in_shape) \
                or not fixed_output(y, out_shape, True):
            return None
        split = parallel.gemm_split(p, c, m, bias32 is not None or act is not None, parallel.PIXEL_ALIGN)
        if split is None:
            return None
        return partial(prepared.run, x.reshape(p, c), pixel_rows(y, out_shape, dtype)[1], split[0],
                       parallel.PIXEL_ALIGN, split[1])

    run_1x1.bind = bind
    return run_1x1


# output rows of a native im2col band: the band's columns stay within this many bytes (L2)
NATIVE_BAND_BYTES = 1 << 20


def native_im2col(s: _conv2d.Conv2d, wk: np.ndarray, ld: int, bias: np.ndarray | None, act: Activation | None):
    """run(x, y) -> bool: a group-1 float32 convolution on the native pool (kernels.c nn_conv_task through
    native.Conv("im2col"): each thread gathers its bands of columns, runs their GEMM and the epilogue); None when
    it does not apply, and run returns False when the pool is off or the input is strided (numpy runs it then).
    The output may be a channel slice of a wider channels-last tensor: the GEMM and epilogue take its pixel stride."""
    if s.dtype != np.float32 or s.group != 1 or not native.available():
        return None
    (kh, kw), (sh, sw), (dh, dw) = s.kernel, s.strides, s.dilations
    kk = kh * kw * s.c
    w = np.zeros((ld, s.m), np.float32)                 # rows past kk stay zero: the padded columns
    w[:kk] = wk[0]
    b = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    band_rows = max(1, NATIVE_BAND_BYTES // (s.ow * ld * 4))
    units = -(-s.n * s.oh * s.ow // parallel.PIXEL_ALIGN)     # the kernel's parts are ranges of pixels
    work = s.n * s.oh * s.ow * (kk + s.m) + parallel.gemm_work(s.n * s.oh * s.ow * kk * s.m)
    conv = native.Conv("im2col", (s.n, s.h, s.w, s.c, s.oh, s.ow, s.m, kh, kw, sh, sw, dh, dw, s.pads[0],
                                  s.pads[1], ld, band_rows), w, b, act_record(act))

    def run(x: np.ndarray, y: np.ndarray) -> bool:
        # y: C-contiguous or a channel slice of a wider tensor (pixel_rows): the kernel takes its pixel stride
        if not parallel.native_pool() or not x.flags.c_contiguous:
            return False
        parts = parallel.native_parts(work, units)
        (cols,) = _scratch.scratch(((parts * band_rows * s.ow * ld,), np.float32))
        conv.run(x, y, cols, parts)
        return True

    def bind(x: np.ndarray, y: np.ndarray, scratch) -> Callable[[], None] | None:
        # the bound call of run (x, y fixed, see nhwc_im2col's bind): its columns in the buffer set's scratch
        if not parallel.native_pool() or not x.flags.c_contiguous:
            return None
        parts = parallel.native_parts(work, units)
        (cols,) = scratch.arrays(((parts * band_rows * s.ow * ld,), np.float32))
        return partial(conv.run, x, y, cols, parts)

    run.bind = bind
    return run


def nhwc_im2col(s: _conv2d.Conv2d, wv: np.ndarray, finish: Callable[[np.ndarray], None],
                bias: np.ndarray | None = None, act: Activation | None = None) -> RunFn:
    """im2col columns (output pixels x kh*kw*C/G, channels fastest) gathered by one strided copy per band,
    one GEMM (batched over super-groups) per band into the output's rows; group 1 in float32 runs on the
    native pool instead (native_im2col)."""
    dtype, pads, padded = s.dtype, s.pads, s.padded
    n, c, m, group, cg, mg, oh, ow, hp, wpad = s.n, s.c, s.m, s.group, s.cg, s.mg, s.oh, s.ow, s.hp, s.wp
    (kh, kw), (sh, sw), (dh, dw) = s.kernel, s.strides, s.dilations
    out_shape = (n, oh, ow, m)
    # Groups of few channels run as super-groups of ``sub`` groups each with block-diagonal weights: the
    # gather copies runs of sub * C/G channels (a copy of 4-channel runs costs more than the GEMM over 8x
    # the weights), the GEMM multiplies zeros.
    sub = max(d for d in range(1, group + 1) if group % d == 0 and (d * cg <= GROUP_MAX_RUN or d == 1))
    sg, cs, ms = group // sub, sub * cg, sub * mg        # super-groups, their input and output channels
    kk = kh * kw * cs
    w6 = wv.reshape(sg, sub, mg, cg, kh, kw)
    # wk[s, (i, j, b, c), (b', o)] = w[group s * sub + b, out o, in c, tap (i, j)] where b == b', else 0
    wk = np.ascontiguousarray(np.einsum("sbocij,bd->sijbcdo", w6, np.eye(sub, dtype=dtype))).reshape(sg, kk, ms)
    # a row of columns of a group-1 convolution starts on a multiple of ALIGN_COLUMNS elements: the stem's
    # 7x7x3 = 147 columns in rows of 152 run (12544 x 147) @ (147 x 64) in 0.63 ms instead of 0.77
    ld = -(-kk // ALIGN_COLUMNS) * ALIGN_COLUMNS if sg == 1 else sg * kk
    imgs, rows, bands = _bands(n, oh, ow * ld * dtype.itemsize, BAND_BYTES)
    parts = ([((imgs, hp, wpad, c), dtype)] if padded else []) + [((imgs * rows * ow * ld,), dtype)]
    _scratch.reserve(_scratch.nbytes_of(*parts))
    native_run = native_im2col(s, wk, ld, bias, act) if sg == 1 else None
    # work: the gather of the columns, the GEMM, the epilogue over the output
    split = _Split(bands, n, oh, ow * ld * dtype.itemsize, BAND_BYTES,
                   n * oh * ow * (kk * sg + m) + parallel.gemm_work(n * oh * ow * kk * ms * sg))

    def run_im2col(inputs, outputs):
        x = inputs[0]
        y = pixel_rows(outputs[0], out_shape, dtype)[0]
        if native_run is not None and native_run(x, y):
            return (y,)
        split.run(lambda group: im2col_bands(x, y, group))
        return (y,)

    def bind(inputs, outputs, scratch):
        # NOTE: a planned step (straight.bind): the native kernel on the fixed buffers, its split chosen and its
        # columns' scratch taken once (the buffer set's: never another thread's); the numpy bands decline
        x, y = inputs[0], outputs[0]
        if native_run is None or not fixed_input(x, (n, s.h, s.w, c)) or not fixed_output(y, out_shape, True):
            return None
        return native_run.bind(x, y, scratch)

    bind.takes_scratch = True
    run_im2col.bind = bind

    def im2col_bands(x, y, group):
        bufs = _scratch.scratch(*parts)     # the scratch of the thread running this group of bands
        cols_all = bufs[-1]
        pad_for = None
        for b0, b1, r0, r1 in group:
            xb = x[b0:b1]
            if padded:
                if pad_for != (b0, b1):
                    _conv2d.pad_into(bufs[0][:b1 - b0], xb, pads, True)
                    pad_for = (b0, b1)
                xb = bufs[0][:b1 - b0]
            si, s0, s1, s2 = xb.strides
            q = (b1 - b0) * (r1 - r0) * ow
            # cols[image, row, col, super-group, tap i, tap j, channel] =
            #     xp[image, row * sh + i * dh, col * sw + j * dw, super-group * cs + channel]
            window = as_strided(xb[:, r0 * sh:], shape=(b1 - b0, r1 - r0, ow, sg, kh, kw, cs),
                                strides=(si, sh * s0, sw * s1, cs * s2, dh * s0, dw * s1, s2), writeable=False)
            cols = cols_all[:q * ld]
            item = cols.itemsize
            # the destination: (q, sg * kk) columns in rows of ld elements, seen as the window's shape
            dst = as_strided(cols, shape=window.shape, strides=(
                (r1 - r0) * ow * ld * item, ow * ld * item, ld * item, kk * item, kw * cs * item, cs * item, item))
            np.copyto(dst, window)
            yr = y[b0:b1, r0:r1].reshape(q, m)
            if sg == 1:
                parallel.matmul(cols.reshape(q, ld)[:, :kk], wk[0], out=yr)
            else:
                # super-group s's pixels x columns are a (q, kk) matrix with row stride sg * kk, its
                # outputs one with row stride M: BLAS reads and writes them in place
                parallel.matmul(cols.reshape(q, sg, kk).transpose(1, 0, 2), wk,
                          out=yr.reshape(q, sg, ms).transpose(1, 0, 2))
            finish(y[b0:b1, r0:r1])

    return run_im2col


# few output channels over a deep window run as output-side shifts (nhwc_shift): at most this many outputs (the
# direct kernel pads M to 8), at least this many products an output (C * KH * KW), at most this much scratch
# for the products Z. Measured at 1 thread, median of 15 (direct / shifts, ms): 256 channels 7x7 over 30x30 into
# 1 output 14.4 / 0.67, into 3 18.6 / 2.0; 256 6x6 over 22x22 into 1 1.09 / 0.36; 64 5x5 over 40x40 into 2
# 0.61 / 0.49; but 3x3 ones padded: 32 at 112^2 into 1 1.44 / 0.92, 64 at 56^2 into 2 0.72 / 0.72, 128 at 28^2
# into 4 0.42 / 0.47, 16 at 224^2 into 1 14.9 / 18.3 (Z's passes over memory)
SHIFT_MAX_M = 4
SHIFT_MIN_DEPTH = 2048
SHIFT_MAX_BYTES = 16 << 20


def nhwc_shift_fits(s: _conv2d.Conv2d) -> bool:
    """Whether nhwc_shift takes the convolution (see SHIFT_MAX_M); not when NNHAL_DIRECT=2 forces every group-1
    convolution onto the direct kernel (A/B measurements, direct_conv.direct_fits)."""
    taps = s.kernel[0] * s.kernel[1]
    return os.environ.get("NNHAL_DIRECT") != "2" and s.group == 1 and s.strides == (1, 1) and taps > 1 \
        and s.m <= SHIFT_MAX_M and s.c * taps >= SHIFT_MIN_DEPTH \
        and s.n * s.hp * s.wp * taps * s.m * s.dtype.itemsize <= SHIFT_MAX_BYTES


def nhwc_shift(s: _conv2d.Conv2d, wv: np.ndarray, finish: Callable[[np.ndarray], None]) -> RunFn:
    """Few output channels over a deep window (SiamFC's cross-correlation: a 256-channel 7x7 template into one
    score map): Z = xp (N*Hp*Wp, C) @ W (C, KH*KW*M) as one GEMM over the padded input, then y = the sum over
    taps of Z's tap columns shifted by the tap's offset (KH*KW passes over the small output)."""
    dtype, n, c, m, hp, wpad, oh, ow = s.dtype, s.n, s.c, s.m, s.hp, s.wp, s.oh, s.ow
    (kh, kw), (dh, dw) = s.kernel, s.dilations
    taps = kh * kw
    wt = np.ascontiguousarray(wv.transpose(1, 2, 3, 0).reshape(c, taps * m), dtype=dtype)     # (C, taps * M)
    shifts = [(i * kw + j, slice(i * dh, i * dh + oh), slice(j * dw, j * dw + ow))
              for i in range(kh) for j in range(kw)]
    parts = ([((n, hp, wpad, c), dtype)] if s.padded else []) + [((n * hp * wpad * taps * m,), dtype)]
    _scratch.reserve(_scratch.nbytes_of(*parts))

    def run_shift(inputs, outputs):
        x = inputs[0]
        y = pixel_rows(outputs[0], (n, oh, ow, m), dtype)[0]
        bufs = _scratch.scratch(*parts)
        if s.padded:
            _conv2d.pad_into(bufs[0], x, s.pads, True)
            x = bufs[0]
        z = bufs[-1].reshape(n, hp, wpad, taps, m)
        parallel.matmul(x.reshape(n * hp * wpad, c), wt, out=z.reshape(n * hp * wpad, taps * m))
        for t, rows, cols in shifts:
            if t == 0:
                np.copyto(y, z[:, rows, cols, t])
            else:
                np.add(y, z[:, rows, cols, t], out=y)
        finish(y)
        return (y,)

    return run_shift


class ConvGemmNHWC(Kernel):
    """2-D convolution, constant weights, static shapes, channels last: GEMM without im2col for 1x1,
    tap-wise multiply-adds for depthwise, im2col bands else."""

    op_type = "Conv"
    name = "nhwc-gemm"
    layout = "NHWC"
    fuse_activation = True

    def score(self, node, ins, outs) -> int:
        return 10 if _conv2d.geometry(node, ins, outs) is not None else 0

    @staticmethod
    def path(s: _conv2d.Conv2d) -> str:
        """The branch prepare takes: "depthwise", "grouped" (native), "shift", "direct" (native), "1x1" or
        "im2col"."""
        # one input channel and group 1 (a grey or spectrogram stem, 1 -> M) is a depthwise convolution of
        # multiplier M, which only numpy's tap-wise loop runs: the direct kernel takes it (1 -> 32 3x3 at 32x128:
        # 0.05 ms against 1.0, one thread; device/cpu/native/direct_conv.py)
        direct = direct_conv.direct_fits(s.n, s.c, s.m, s.kernel, s.group, s.dtype, s.oh * s.ow)
        if s.cg == 1 and not (s.group == 1 and direct):
            return "depthwise"
        if native_grouped_fits(s):
            return "grouped"
        if nhwc_shift_fits(s):
            return "shift"
        if direct:
            # few channels on a side: straight from the input, no im2col (device/cpu/native/direct_conv.py)
            return "direct"
        return "1x1" if s.kernel == (1, 1) and not s.padded else "im2col"

    def strided_output_for(self, node, ins, outs) -> bool:
        """The GEMM and direct paths write a channel slice of a wider channels-last tensor in place (their GEMMs
        take the output's pixel stride as ldc, the direct kernel stores through it, the epilogue follows it); the
        depthwise and grouped ones do not."""
        return self.path(_conv2d.conv2d(node, ins, outs)) in ("1x1", "im2col", "direct")

    def nchw_input(self, node, ins, outs) -> Kernel | None:
        """The variant that reads the input channels first (the layout pass's hook for a region's first op whose
        input stays NCHW: a model's image): the direct kernel's, for inputs of at most DIRECT_NCHW_MAX_C
        channels; None for the other paths."""
        s = _conv2d.conv2d(node, ins, outs)
        fits = self.path(s) == "direct" and s.c <= DIRECT_NCHW_MAX_C
        return ConvDirectChannelsFirst(direct_conv.READ_NCHW) if fits else None

    def nchw_output(self, node, ins, outs) -> Kernel | None:
        """The variant that writes the output channels first (the layout pass's hook for a region's last op whose
        output is needed NCHW: a model's output): the direct kernel's; None for the other paths."""
        fits = self.path(_conv2d.conv2d(node, ins, outs)) == "direct"
        return ConvDirectChannelsFirst(direct_conv.WRITE_NCHW) if fits else None

    def prepare(self, node, ins, outs) -> RunFn:
        return nhwc_conv(_conv2d.conv2d(node, ins, outs), ins[1].value, bias_of(ins), activation_of(node))


def nhwc_conv(s: _conv2d.Conv2d, wv: np.ndarray, bias: np.ndarray | None, act: Activation | None) -> RunFn:
    """The run of ConvGemmNHWC's path for geometry ``s``, weights ``wv`` (M, C/G, KH, KW), bias (M,) or None
    and the fused activation: the weights packed for it here (once at prepare, or every run for run-time
    weights: ConvDynamicNHWC)."""
    finish = _epilogue(bias, act, s.dtype, s.ow * s.m)
    path = ConvGemmNHWC.path(s)
    if path == "depthwise":
        return native_depthwise(s, wv, bias, act) or nhwc_depthwise(s, wv, finish)
    if path == "grouped":
        return native_grouped(s, wv, bias, act)
    if path == "shift":
        return nhwc_shift(s, wv, finish)
    if path == "direct":
        work = direct_conv.pool_work(s)
        return _native_rows_run(s, work, direct_conv.make(s, wv, bias, act_record(act)), strided=True)
    if path == "1x1":
        return nhwc_1x1(s, wv, finish, bias, act)
    return nhwc_im2col(s, wv, finish, bias, act)


class ConvDynamicNHWC(Kernel):
    """2-D convolution whose weights (and bias) are run-time tensors of static shape, channels last: Siamese
    trackers' cross-correlations (the template branch's features are the kernel over the search branch's,
    depthwise or C-channel), dynamic-filter networks. Every run packs the weights it is given for
    ConvGemmNHWC's path (native depthwise, grouped or direct kernel, 1x1 or im2col GEMM) and runs it."""

    op_type = "Conv"
    name = "nhwc-dynamic"
    layout = "NHWC"
    fuse_activation = True
    # the run for the weights of one run: (geometry, weights, bias, activation) -> RunFn
    make = staticmethod(nhwc_conv)

    def score(self, node, ins, outs) -> int:
        return 10 if _conv2d.geometry(node, ins, outs, dynamic=True) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        return dynamic_run(node, _conv2d.conv2d(node, ins, outs, dynamic=True), len(ins) > 2 and ins[2] is not None,
                           self.make)


def dynamic_run(node: Node, s: _conv2d.Conv2d, with_bias: bool,
                make: Callable[[_conv2d.Conv2d, np.ndarray, np.ndarray | None, Activation | None], RunFn]) -> RunFn:
    """The run of a convolution with run-time weights (and bias): each run checks their shapes against the
    prepared geometry ``s``, makes the constant-weight kernel's run for them (``make``: nhwc_conv or
    conv.nchw_conv, which pack the weights) and runs it on input 0."""
    act = activation_of(node)
    wshape = (s.m, s.cg, *s.kernel)

    def run_dynamic(inputs, outputs):
        w, bias = inputs[1], inputs[2] if with_bias else None
        if w.shape != wshape or bias is not None and bias.shape != (s.m,):
            raise ShapeError(f"{where(node)} on device 'cpu': run-time weights of shape {list(w.shape)}"
                             f"{'' if bias is None else f' and bias {list(bias.shape)}'}; the plan was "
                             f"prepared for weights {list(wshape)} and bias [{s.m}]")
        # NOTE: packed anew every run (the weights change with each template): O(weights) work, small against
        # the convolution's O(weights x output pixels)
        return make(s, np.asarray(w, s.dtype), bias, act)([inputs[0]], outputs)

    return run_dynamic


class ConvDirectChannelsFirst(Kernel):
    """The direct kernel (native/direct_conv.py) with a channels-first side: the input read as (N, C, H, W) in
    place (READ_NCHW) or the output written as (N, M, OH, OW) (WRITE_NCHW) by its tile stores, so the layout
    pass inserts no conversion at that edge of the NHWC region. Only the layout pass takes it (through
    ConvGemmNHWC's nchw_input and nchw_output hooks); the other side is channels last: a channels-last output
    may be a channel slice of a wider tensor (a Concat's), as ConvGemmNHWC's direct path writes."""

    op_type = "Conv"
    fuse_activation = True

    def __init__(self, layouts: int):
        self.layouts = layouts
        self.name = "direct-nchw-in" if layouts == direct_conv.READ_NCHW else "direct-nchw-out"

    def strided_output_for(self, node, ins, outs) -> bool:
        """A channels-last output is written through its pixel stride; an NCHW one is C-contiguous."""
        return not self.layouts & direct_conv.WRITE_NCHW

    def prepare(self, node, ins, outs) -> RunFn:
        s = _conv2d.conv2d(node, ins, outs)
        conv = direct_conv.make(s, ins[1].value, bias_of(ins), act_record(activation_of(node)), self.layouts)
        work = direct_conv.pool_work(s)
        rows = s.n * s.oh
        nchw_out = bool(self.layouts & direct_conv.WRITE_NCHW)
        out_shape = (s.n, s.m, s.oh, s.ow) if nchw_out else (s.n, s.oh, s.ow, s.m)
        # NOTE: an NCHW output of one pixel an image (a squeeze-excite gate) has the channels-last order too, and the
        # C side, which tells the two apart by the channel stride (OH * OW), takes it as channels last: it is handed
        # as the (N, 1, 1, M) view of the same memory
        one_pixel = nchw_out and s.oh * s.ow == 1

        def run(inputs, outputs):
            x = inputs[0]
            if not x.flags.c_contiguous or x.dtype != np.float32:
                x = np.ascontiguousarray(x, dtype=np.float32)
            y = outputs[0]
            if not nchw_out:
                y = pixel_rows(y, out_shape, np.float32)[0]
            elif y is None or not y.flags.c_contiguous or y.shape != out_shape or y.dtype != np.float32:
                y = np.empty(out_shape, np.float32)
            conv.run(x, y.reshape(s.n, 1, 1, s.m) if one_pixel else y, None,
                     parallel.native_parts(work, rows) if parallel.native_pool() else 1)
            return (y,)

        in_shape = (s.n, s.c, s.h, s.w) if self.layouts & direct_conv.READ_NCHW else (s.n, s.h, s.w, s.c)

        def bind(inputs, outputs):
            # NOTE: a planned step (straight.bind): the prepared native call on the fixed buffers, split chosen once
            x, y = inputs[0], outputs[0]
            if not fixed_input(x, in_shape) or not fixed_output(y, out_shape, not nchw_out):
                return None
            return partial(conv.run, x, y.reshape(s.n, 1, 1, s.m) if one_pixel else y, None,
                           parallel.native_parts(work, rows) if parallel.native_pool() else 1)

        run.bind = bind
        return run


def _native_winograd(s: _conv2d.Conv2d, u: np.ndarray, bias: np.ndarray | None, act: Activation | None, tw: int,
                     nt: int, split: _Split) -> RunFn:
    """The run of ConvWinogradNHWC on the native transforms (native/nn_winograd.h): per band, the input tiles
    transformed straight from the input (its padding read as zeros), the 36 products on the BLAS, then the
    output transform with the bias and the activation, written through the output's pixel stride. ``u``: the
    transformed weights (36, C, M); ``nt``: the most tiles a band holds; ``split``: the bands over threads."""
    n, c, m = s.n, s.c, s.m
    out_shape = (n, s.oh, s.ow, m)
    geo_in, geo_out = (n, s.h, s.w, c, s.pads[0], s.pads[1], tw), (n, s.oh, s.ow, m, tw)
    b = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    rec = act_record(act)
    parts = [((36 * nt * c,), np.float32), ((36 * nt * m,), np.float32)]
    _scratch.reserve(_scratch.nbytes_of(*parts))
    transform_in, transform_out, product = native.winograd_input, native.winograd_output, parallel.matmul

    def run_winograd(inputs, outputs):
        x = inputs[0]
        if not x.flags.c_contiguous or x.dtype != np.float32:
            x = np.ascontiguousarray(x, dtype=np.float32)
        y = pixel_rows(outputs[0], out_shape, np.float32)[0]
        split.run(lambda group: bands(x, y, group))
        return (y,)

    def bands(x, y, group):
        vbuf, zbuf = _scratch.scratch(*parts)       # the scratch of the thread running this group
        pool = parallel.native_pool()
        for band in group:
            b0, b1, t0, t1 = band
            k = (b1 - b0) * (t1 - t0) * tw
            v, z = vbuf[:36 * k * c], zbuf[:36 * k * m]
            # NOTE: a transform writes or reads 36 floats a tile and channel with a few adds each: one work unit
            # an element, as the pool's copies count them
            transform_in(x, v, geo_in, band, parallel.native_parts(36 * k * c, k) if pool else 1)
            product(v.reshape(36, k, c), u, out=z.reshape(36, k, m))
            transform_out(z, y, b, rec, geo_out, band, parallel.native_parts(36 * k * m, k) if pool else 1)

    def bind(inputs, outputs, scratch):
        # NOTE: a planned step (straight.bind): each band's two transforms and its 36 products on the fixed buffers,
        # their views, splits and the tiles' scratch (the buffer set's) made once; with the pools off the bands
        # may go to Python threads, each on its own scratch: the bind declines
        x, y = inputs[0], outputs[0]
        if not parallel.native_pool() or not fixed_input(x, (n, s.h, s.w, c)) or not fixed_output(y, out_shape, True):
            return None
        (group,) = split.groups(parallel.threads())
        vbuf, zbuf = scratch.arrays(*parts)
        calls = []
        for band in group:
            b0, b1, t0, t1 = band
            k = (b1 - b0) * (t1 - t0) * tw
            v, z = vbuf[:36 * k * c], zbuf[:36 * k * m]
            calls.append((band, v, v.reshape(36, k, c), z, z.reshape(36, k, m), parallel.native_parts(36 * k * c, k),
                          parallel.native_parts(36 * k * m, k)))

        def bound() -> None:
            for band, v, v3, z, z3, parts_in, parts_out in calls:
                transform_in(x, v, geo_in, band, parts_in)
                product(v3, u, out=z3)
                transform_out(z, y, b, rec, geo_out, band, parts_out)

        return bound

    bind.takes_scratch = True
    run_winograd.bind = bind
    return run_winograd


class ConvWinogradNHWC(Kernel):
    """3x3 stride-1 2-D convolution (group 1, constant weights, enough channels), channels last, by
    Winograd F(4x4, 3x3)."""

    op_type = "Conv"
    name = "nhwc-winograd"
    layout = "NHWC"
    fuse_activation = True
    strided_output = True           # the output tiles are scattered through the output's own strides

    def score(self, node, ins, outs) -> int:
        fits = _conv2d.winograd_fits(node, ins, outs)
        if fits is None or not any(fits[0] >= c and fits[1] >= s for c, s in WINOGRAD_MIN_OUT.items()):
            return 0
        if direct_conv.beats_winograd(ins[0].shape[1], ins[1].value.shape[0], ins[0].dtype):
            return 0
        return 20

    def prepare(self, node, ins, outs) -> RunFn:
        s = _conv2d.conv2d(node, ins, outs)
        wv, dtype, n, c, h, w_in, m, oh, ow = ins[1].value, s.dtype, s.n, s.c, s.h, s.w, s.m, s.oh, s.ow
        pt, pl = s.pads[:2]
        th, tw = -(-oh // 4), -(-ow // 4)
        hp, wpad = 4 * th + 2, 4 * tw + 2
        # pads beyond the given ones up to whole tiles: zeros whose outputs are cropped
        pads = [pt, pl, hp - pt - h, wpad - pl - w_in]
        u = _conv2d.winograd_weights(wv, dtype).transpose(0, 2, 1).copy()                # (36, C, M)
        kb, ka = _conv2d.winograd_transforms(dtype)                                      # (36, 36), (16, 36)
        out_shape = (n, oh, ow, m)
        finish = _epilogue(bias_of(ins), activation_of(node), dtype, ow * m)
        item = np.dtype(dtype).itemsize
        row_bytes = 36 * max(c, m) * tw * item
        imgs, rows, bands = _bands(n, th, row_bytes, WINOGRAD_BAND_BYTES)
        nt = imgs * rows * tw
        # two buffers in turn: input tiles (a) -> transformed (b) -> products (a) -> output tiles (b) -> cropped (a)
        parts = [((imgs, hp, wpad, c), dtype), ((36 * nt * max(c, m),), dtype), ((nt * max(36 * c, 16 * m),), dtype)]
        _scratch.reserve(_scratch.nbytes_of(*parts))
        split = _Split(bands, n, th, row_bytes, WINOGRAD_BAND_BYTES,
                       n * th * tw * 36 * (c + m) + parallel.gemm_work(n * th * tw * 36 * c * m))
        if native.available() and dtype == np.float32 and os.environ.get("NNHAL_NATIVE_WINOGRAD") != "0":
            return _native_winograd(s, u, bias_of(ins), activation_of(node), tw, nt, split)

        def run_winograd(inputs, outputs):
            x = inputs[0]
            y = outputs[0] if outputs[0] is not None else np.empty(out_shape, dtype)
            split.run(lambda group: winograd_bands(x, y, group))
            return (y,)

        def winograd_bands(x, y, group):
            xp_all, abuf, bbuf = _scratch.scratch(*parts)   # the scratch of the thread running this group
            yi, ys0, ys1, ys2 = y.strides
            pad_for = None
            for b0, b1, t0, t1 in group:
                nb, nr = b1 - b0, t1 - t0
                xp = xp_all[:nb]
                if pad_for != (b0, b1):
                    _conv2d.pad_into(xp, x[b0:b1], pads, True)
                    pad_for = (b0, b1)
                si, s0, s1, s2 = xp.strides
                k = nb * nr * tw
                r0, r1 = 4 * t0, min(oh, 4 * t1)
                # d[a, a', image, tile row, tile col, channel] = xp[image, 4 * tile row + a, 4 * tile col + a', channel]
                src = as_strided(xp[:, 4 * t0:], shape=(6, 6, nb, nr, tw, c),
                                 strides=(s0, s1, si, 4 * s0, 4 * s1, s2), writeable=False)
                d = abuf[:36 * k * c]
                np.copyto(d.reshape(src.shape), src)
                v = bbuf[:36 * k * c]
                parallel.matmul(kb, d.reshape(36, k * c), out=v.reshape(36, k * c))
                z = abuf[:36 * k * m]
                parallel.matmul(v.reshape(36, k, c), u, out=z.reshape(36, k, m))
                o = bbuf[:16 * k * m]
                parallel.matmul(ka, z.reshape(36, k * m), out=o.reshape(16, k * m))
                # (image, tile row, r, tile col, s, M)
                tiles = o.reshape(4, 4, nb, nr, tw, m).transpose(2, 3, 0, 4, 1, 5)
                if r1 != 4 * t1 or ow != 4 * tw:                                          # edge tiles cropped
                    full = abuf[:16 * k * m].reshape(nb, nr, 4, tw, 4, m)
                    np.copyto(full, tiles)
                    np.copyto(y[b0:b1, r0:r1], full.reshape(nb, 4 * nr, 4 * tw, m)[:, :r1 - r0, :ow])
                else:
                    dst = as_strided(y[b0:, r0:], shape=(nb, nr, 4, tw, 4, m),
                                     strides=(yi, 4 * ys0, ys0, 4 * ys1, ys1, ys2))
                    np.copyto(dst, tiles)
                finish(y[b0:b1, r0:r1])

        return run_winograd
