"""Conv on the cpu device: the fast 2-D kernels beside the host reference (hostkernels/op_conv.py: N-d
im2col + GEMM, here with its products on the pool).

gemm (2-D, constant weights, static shapes), NCHW, weights packed at prepare:
1x1 convolutions are one GEMM straight on the input (a strided copy first
when strided); depthwise ones accumulate one multiply-add per kernel tap over
all channels at once; stride-1 ones with no more output than input channels
on a large map run one GEMM over the padded input for all taps and add the
shifted results; the rest gather im2col columns tap by tap into per-thread
scratch (in bands of output rows to bound it) and run one GEMM per group and
band into the output. Bias and a fused activation (set by the CPU plan)
finish in the output.

winograd: 3x3 stride-1 convolutions with at least 64 input and output
channels on maps of 28x28 and more, by Winograd F(4x4, 3x3) with every
transform one GEMM over all tiles and channels (36 multiplies per 16 outputs
instead of 144).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nnhal.device.cpu import parallel
from nnhal.device.cpu.kernels import _gates
from nnhal.device.cpu.kernels._conv_nhwc import (
    ConvDynamicNHWC,
    ConvGemmNHWC,
    ConvWinogradNHWC,
    act_record,
    bias_of,
    native_depthwise,
    nhwc_conv,
)
from nnhal.device.cpu.kernels._pooled import Pooled
from nnhal.device.cpu.native import direct_conv
from nnhal.hostkernels import _conv2d, _scratch
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.fused import Activation, activation_of
from nnhal.hostkernels.op_conv import ConvIm2col
from nnhal.operator.base import Info


class ConvIm2colPooled(Pooled, ConvIm2col):
    """The reference N-d im2col + GEMM (hostkernels/op_conv.py) with its products on the cpu device's pool."""


# scratch bound of one im2col band (bytes); bigger convolutions run in bands of output rows
BAND_BYTES = 6 << 20
# NOTE: splitting a convolution over Python threads (device/cpu/threads, GEMM parts on
# single-threaded BLAS) was measured and lost on an idle 2-core machine (ResNet-50 55 ms against 74 ms:
# OpenBLAS's idle workers spin against the pool thread; element-wise splits lost 1-5 %), so these kernels
# run one GEMM on BLAS's own threads; the zoo's shipped-output tests also pin that GEMM's rounding.
# output-side shifts instead of im2col when output channels <= this times input channels
SHIFT_MAX_RATIO = 1.0
# ... and when the padded map is at most this much larger than the output (the shift GEMM runs over it all;
# on 7x7 or 14x14 maps the border costs more than im2col's copies)
SHIFT_MAX_PAD_GROWTH = 1.2

Finish = Callable[[np.ndarray], tuple]


def _epilogue(bias_value: np.ndarray | None, act: Activation | None, s: _conv2d.Conv2d) -> Finish:
    """finish(y): the bias and the fused activation in place in y (N or no batch axis, M, OH, OW)."""
    bias = None if bias_value is None else np.asarray(bias_value).astype(s.dtype).reshape(s.m, 1, 1)

    def finish(y: np.ndarray) -> tuple:
        if bias is not None:
            np.add(y, bias, out=y)
        _gates.apply_activation(y, act)
        return (y,)

    return finish


def _taps(s: _conv2d.Conv2d, r0: int = 0, r1: int | None = None) -> list[tuple[int, int, tuple]]:
    """(i, j, index of kernel tap (i, j) over output rows r0..r1 in the padded input's last two axes)."""
    r1 = s.oh if r1 is None else r1
    (kh, kw), (sh, sw), (dh, dw) = s.kernel, s.strides, s.dilations
    return [(i, j, (Ellipsis, slice(i * dh + r0 * sh, i * dh + r0 * sh + (r1 - r0 - 1) * sh + 1, sh),
                    slice(j * dw, j * dw + (s.ow - 1) * sw + 1, sw)))
            for i in range(kh) for j in range(kw)]


def _output(outputs: list, s: _conv2d.Conv2d) -> np.ndarray:
    return outputs[0] if outputs[0] is not None else np.empty((s.n, s.m, s.oh, s.ow), s.dtype)


def gemm_1x1(s: _conv2d.Conv2d, wv: np.ndarray, finish: Finish) -> RunFn:
    """1x1 unpadded: one GEMM straight on the input (a strided copy first when strided), batched over groups."""
    n, c, m, group, p = s.n, s.c, s.m, s.group, s.oh * s.ow
    sh, sw = s.strides
    wp = np.ascontiguousarray(wv.reshape(group, s.mg, s.cg))
    parts = [((n, c, s.oh, s.ow), s.dtype)] if (sh, sw) != (1, 1) else []
    if parts:
        _scratch.reserve(_scratch.nbytes_of(*parts))

    def run_1x1(inputs, outputs):
        x = inputs[0]
        y = _output(outputs, s)
        if parts:
            (xs,) = _scratch.scratch(*parts)
            np.copyto(xs, x[:, :, :(s.oh - 1) * sh + 1:sh, :(s.ow - 1) * sw + 1:sw])
            x = xs
        if group > 1:
            parallel.matmul(wp, x.reshape(n, group, s.cg, p), out=y.reshape(n, group, s.mg, p))
        elif n == 1:
            parallel.matmul(wp[0], x.reshape(c, p), out=y.reshape(m, p))
        else:
            parallel.matmul(wp[0], x.reshape(n, c, p), out=y.reshape(n, m, p))
        return finish(y)

    return run_1x1


def gemm_depthwise(s: _conv2d.Conv2d, wv: np.ndarray, finish: Finish) -> RunFn:
    """One input and output channel per group: one multiply-add per kernel tap over all channels at once."""
    c, (kh, kw) = s.c, s.kernel
    wd = np.ascontiguousarray(wv.reshape(c, kh * kw).T).reshape(kh * kw, 1, c, 1, 1)
    parts = ([((s.n, c, s.hp, s.wp), s.dtype)] if s.padded else []) + [((s.n, c, s.oh, s.ow), s.dtype)]
    _scratch.reserve(_scratch.nbytes_of(*parts))
    taps = _taps(s)

    def run_dw(inputs, outputs):
        x = inputs[0]
        y = _output(outputs, s)
        bufs = _scratch.scratch(*parts)
        tmp = bufs[-1]
        if s.padded:
            _conv2d.pad_into(bufs[0], x, s.pads)
            x = bufs[0]
        for k, (_, _, index) in enumerate(taps):
            if k == 0:
                np.multiply(x[index], wd[k], out=y)
            else:
                np.multiply(x[index], wd[k], out=tmp)
                np.add(y, tmp, out=y)
        return finish(y)

    return run_dw


def shift_fits(s: _conv2d.Conv2d) -> bool:
    """Output-side shifts pay when there are fewer output than input channels and little padding."""
    return s.group == 1 and s.strides == (1, 1) and s.kernel[0] * s.kernel[1] > 1 \
        and s.m <= SHIFT_MAX_RATIO * s.c and s.hp * s.wp <= SHIFT_MAX_PAD_GROWTH * s.oh * s.ow


def gemm_shift(s: _conv2d.Conv2d, wv: np.ndarray, finish: Finish) -> RunFn:
    """Z = W_taps (kh*kw*M, C) @ xp (C, Hp*Wp) in one GEMM, y = the sum over taps of shifted Z slices:
    cheaper than im2col when M < C (Z has kh*kw*M rows where im2col has kh*kw*C)."""
    c, m, hp, wpad, (kh, kw), (dh, dw) = s.c, s.m, s.hp, s.wp, s.kernel, s.dilations
    wt = np.ascontiguousarray(wv.transpose(2, 3, 0, 1).reshape(kh * kw * m, c))
    parts = ([((c, hp, wpad), s.dtype)] if s.padded else []) + [((kh * kw, m, hp, wpad), s.dtype)]
    _scratch.reserve(_scratch.nbytes_of(*parts))
    shifts = [(i * kw + j, slice(i * dh, i * dh + s.oh), slice(j * dw, j * dw + s.ow))
              for i in range(kh) for j in range(kw)]

    def run_shift(inputs, outputs):
        x = inputs[0]
        y = _output(outputs, s)
        bufs = _scratch.scratch(*parts)
        z = bufs[-1].reshape(kh * kw, m, hp, wpad)
        for b in range(s.n):
            xb = x[b]
            if s.padded:
                _conv2d.pad_into(bufs[0], xb, s.pads)
                xb = bufs[0]
            parallel.matmul(wt, xb.reshape(c, hp * wpad), out=z.reshape(kh * kw * m, hp * wpad))
            yb = y[b]
            (t0, r0, c0), (t1, r1, c1) = shifts[:2]
            np.add(z[t0, :, r0, c0], z[t1, :, r1, c1], out=yb)
            for t, r, cc in shifts[2:]:
                np.add(yb, z[t, :, r, cc], out=yb)
            finish(yb)
        return (y,)

    return run_shift


def gemm_im2col(s: _conv2d.Conv2d, wv: np.ndarray, finish: Finish) -> RunFn:
    """im2col columns gathered tap by tap into per-thread scratch, in bands of output rows (to bound it),
    and one GEMM per group and band into the output."""
    c, group, mg, ow, (kh, kw) = s.c, s.group, s.mg, s.ow, s.kernel
    kk, p = s.cg * kh * kw, s.oh * ow
    wp = np.ascontiguousarray(wv.reshape(group, mg, kk))
    rows = max(1, min(s.oh, BAND_BYTES // max(1, c * kh * kw * ow * s.dtype.itemsize)))
    bands = [(r0, min(s.oh, r0 + rows)) for r0 in range(0, s.oh, rows)]
    parts = ([((c, s.hp, s.wp), s.dtype)] if s.padded else []) + [((c * kh * kw * rows * ow,), s.dtype)]
    _scratch.reserve(_scratch.nbytes_of(*parts))
    band_taps = [_taps(s, r0, r1) for r0, r1 in bands]

    def run_im2col(inputs, outputs):
        x = inputs[0]
        y = _output(outputs, s)
        bufs = _scratch.scratch(*parts)
        for b in range(s.n):
            xb = x[b]
            if s.padded:
                _conv2d.pad_into(bufs[0], xb, s.pads)
                xb = bufs[0]
            yb = y[b].reshape(group, mg, p)
            for (r0, r1), taps in zip(bands, band_taps):
                q = (r1 - r0) * ow
                cols = bufs[-1][:c * kh * kw * q]
                cols5 = cols.reshape(c, kh, kw, r1 - r0, ow)
                for i, j, index in taps:
                    np.copyto(cols5[:, i, j], xb[index])
                if group == 1:
                    parallel.matmul(wp[0], cols.reshape(kk, q), out=yb[0, :, r0 * ow:r1 * ow])
                else:
                    parallel.matmul(wp, cols.reshape(group, kk, q), out=yb[:, :, r0 * ow:r1 * ow])
        return finish(y)

    return run_im2col


class ConvGemm(Kernel):
    """2-D convolution, constant weights, static shapes: GEMM without im2col for 1x1, tap-wise
    multiply-adds for depthwise, output-side shifts for few output channels, im2col bands else."""

    op_type = "Conv"
    name = "gemm"
    fuse_activation = True

    def score(self, node, ins, outs) -> int:
        return 10 if _conv2d.geometry(node, ins, outs) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        return nchw_conv(_conv2d.conv2d(node, ins, outs), ins[1].value, bias_of(ins), activation_of(node))


def nchw_conv(s: _conv2d.Conv2d, wv: np.ndarray, bias: np.ndarray | None, act: Activation | None) -> RunFn:
    """The run of ConvGemm's path for geometry ``s``, weights ``wv`` (M, C/G, KH, KW), bias (M,) or None and
    the fused activation: the weights packed for it here (once at prepare, or every run for run-time
    weights: ConvDynamic)."""
    finish = _epilogue(bias, act, s)
    if direct_conv.nchw_fits(s.n, s.c, s.m, s.kernel, s.group, s.dtype, s.oh * s.ow):
        # few channels on a side: the native direct kernel through channels-last copies
        return direct_conv.nchw_run(s, wv, bias, act_record(act))
    if s.kernel == (1, 1) and not s.padded:
        return gemm_1x1(s, wv, finish)
    if s.cg == 1 and s.mg == 1:
        native_dw = native_depthwise(s, wv, bias, act)
        # the native kernel through channels-last copies: 32 channels 3x3 at 112^2 0.5 ms against numpy's
        # 18 passes' 1.9 (1 thread, the Zen 3 VM)
        return direct_conv.channels_first(s, native_dw) if native_dw else gemm_depthwise(s, wv, finish)
    if shift_fits(s):
        return gemm_shift(s, wv, finish)
    return gemm_im2col(s, wv, finish)


def nchw_dynamic(s: _conv2d.Conv2d, wv: np.ndarray, bias: np.ndarray | None, act: Activation | None) -> RunFn:
    """ConvDynamic's run for weights ``wv``: an unpadded 1x1 as ConvGemm's one GEMM on the NCHW input, the rest
    as ConvGemmNHWC's path through channels-last copies of input and output."""
    # NOTE: the NCHW im2col's GEMM has M rows, so a cross-correlation with one output channel (SiamFC's
    # 256-channel 6x6 template over 22x22) is a GEMV over the 9216 x 289 columns: 50 ms there against 1 ms
    # for the channels-last path (the direct kernel) plus 0.1 ms of copies (1 thread)
    if s.kernel == (1, 1) and not s.padded:
        return nchw_conv(s, wv, bias, act)
    return direct_conv.channels_first(s, nhwc_conv(s, wv, bias, act))


class ConvDynamic(ConvDynamicNHWC):
    """2-D convolution whose weights (and bias) are run-time tensors of static shape, where the layout pass
    keeps it channels first (a Siamese tracker's depthwise cross-correlation between reshapes): every run
    packs the weights it is given (nchw_dynamic) and runs them (ConvDynamicNHWC: the channels-last one)."""

    name = "dynamic"
    layout = None
    make = staticmethod(nchw_dynamic)


# ------------------------------------------------------------------ Winograd F(4x4, 3x3) (_conv2d)
# scratch bound of one band of tile rows (bytes, per transformed tensor)
WINOGRAD_BAND_BYTES = 4 << 20
# smallest channel counts (in and out) and output size where Winograd beats im2col + GEMM (at 2 threads:
# 64->64 at 56x56 1.33 ms against 1.85, 128 at 28x28 0.94 against 1.59; 128->32 at 56x56 1.78 against 1.49;
# 256 at 14x14 only 1.25 against 1.40, not worth the transformed weights, 4x the size of the 3x3 ones)
WINOGRAD_MIN_CHANNELS = 64
WINOGRAD_MIN_OUT = 28


class ConvWinograd(ConvGemm):
    """3x3 stride-1 2-D convolution (group 1, constant weights, enough channels) by Winograd F(4x4, 3x3)."""

    name = "winograd"
    fuse_activation = True

    def score(self, node, ins, outs) -> int:
        fits = _conv2d.winograd_fits(node, ins, outs)
        return 20 if fits is not None and fits[0] >= WINOGRAD_MIN_CHANNELS and fits[1] >= WINOGRAD_MIN_OUT else 0

    def prepare(self, node, ins, outs) -> RunFn:
        s = _conv2d.conv2d(node, ins, outs)
        c, m, oh, ow, dtype = s.c, s.m, s.oh, s.ow, s.dtype
        th, tw = -(-oh // 4), -(-ow // 4)
        hp, wpad = 4 * th + 2, 4 * tw + 2
        # pads beyond the given ones up to whole tiles: zeros whose outputs are cropped
        pads = (s.pads[0], s.pads[1], hp - s.pads[0] - s.h, wpad - s.pads[1] - s.w)
        u = _conv2d.winograd_weights(ins[1].value, dtype)
        kb, ka = _conv2d.winograd_transforms(dtype)
        finish = _epilogue(bias_of(ins), activation_of(node), s)
        rows = max(1, min(th, WINOGRAD_BAND_BYTES // max(1, 36 * max(c, m) * tw * dtype.itemsize)))
        bands = [(t0, min(th, t0 + rows)) for t0 in range(0, th, rows)]
        nt = rows * tw
        parts = [((c, hp, wpad), dtype), ((36 * c * nt,), dtype), ((36 * c * nt,), dtype),
                 ((36 * m * nt,), dtype), ((16 * m * nt,), dtype)]
        cropped = not (ow == 4 * tw and oh == 4 * th)
        if cropped:
            parts.append(((m * nt * 16,), dtype))
        _scratch.reserve(_scratch.nbytes_of(*parts))

        def run_winograd(inputs, outputs):
            x = inputs[0]
            y = _output(outputs, s)
            bufs = _scratch.scratch(*parts)
            xp, dbuf, vbuf, zbuf, obuf = bufs[:5]
            sc, s0, s1 = xp.strides
            for b in range(s.n):
                _conv2d.pad_into(xp, x[b], pads)
                yb = y[b]
                for t0, t1 in bands:
                    nr, r0, r1 = t1 - t0, 4 * t0, min(oh, 4 * t1)
                    k = nr * tw
                    d = dbuf[:36 * c * k].reshape(6, 6, c, nr, tw)
                    src = as_strided(xp[:, 4 * t0:, :], shape=(6, 6, c, nr, tw),
                                     strides=(s0, s1, sc, 4 * s0, 4 * s1), writeable=False)
                    np.copyto(d, src)
                    v = vbuf[:36 * c * k].reshape(36, c * k)
                    parallel.matmul(kb, d.reshape(36, c * k), out=v)
                    z = zbuf[:36 * m * k].reshape(36, m, k)
                    parallel.matmul(u, v.reshape(36, c, k), out=z)
                    o = obuf[:16 * m * k].reshape(16, m * k)
                    parallel.matmul(ka, z.reshape(36, m * k), out=o)
                    _store_tiles(yb, o.reshape(4, 4, m, nr, tw).transpose(2, 3, 0, 4, 1), r0, r1, t1,
                                 bufs[5][:16 * m * k] if cropped else None)
                    finish(yb[:, r0:r1, :])
            return (y,)

        return run_winograd


def _store_tiles(yb: np.ndarray, tiles: np.ndarray, r0: int, r1: int, t1: int, crop: np.ndarray | None) -> None:
    """Output tiles (M, tile rows, 4, tile cols, 4) into rows r0:r1 of yb (M, OH, OW): one strided copy,
    through ``crop`` scratch when edge tiles stick out of the output."""
    m, nr, _, tw, _ = tiles.shape
    ow = yb.shape[2]
    if crop is None or ow == 4 * tw and r1 == 4 * t1:
        ys = yb.strides
        dst = as_strided(yb[:, r0:, :], shape=tiles.shape, strides=(ys[0], 4 * ys[1], ys[1], 4 * ys[2], ys[2]))
        np.copyto(dst, tiles)
    else:
        full = crop.reshape(tiles.shape)
        np.copyto(full, tiles)
        np.copyto(yb[:, r0:r1, :], full.reshape(m, 4 * nr, 4 * tw)[:, :r1 - r0, :ow])


class Conv1dGemm(Kernel):
    """1-D convolution (audio front ends, byte and text CNNs) as the 2-D one over (N, C, 1, W): the same
    GEMM kernels (ConvGemm: 1x1, depthwise, shifts, im2col bands) on views, no copy either side."""

    op_type = "Conv"
    name = "gemm-1d"
    fuse_activation = True

    @staticmethod
    def as_2d(node, ins, outs):
        """The node, operand and result infos of the 2-D convolution over (N, C, 1, W), or None when the
        node is not a 1-D convolution with constant weights and static shapes."""
        x, w = ins[0], ins[1]
        if x is None or w is None or w.value is None or x.shape is None or len(x.shape) != 3 \
                or w.value.ndim != 3 or outs[0].shape is None or len(outs[0].shape) != 3:
            return None
        attrs = dict(node.attrs)
        for key, pad in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
            if attrs.get(key):
                attrs[key] = [pad, *attrs[key]]
        if attrs.get("pads"):
            attrs["pads"] = [0, attrs["pads"][0], 0, attrs["pads"][1]]
        node2 = replace(node, attrs=attrs)
        wv = w.value[:, :, None, :]
        ins2 = [Info(x.dtype, (x.shape[0], x.shape[1], 1, x.shape[2])), Info(w.dtype, wv.shape, wv), *ins[2:]]
        o = outs[0]
        outs2 = [Info(o.dtype, None if o.shape is None else (o.shape[0], o.shape[1], 1, o.shape[2]))]
        return node2, ins2, outs2

    def score(self, node, ins, outs) -> int:
        view = self.as_2d(node, ins, outs)
        return 10 if view is not None and _conv2d.geometry(*view) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        node2, ins2, outs2 = self.as_2d(node, ins, outs)
        run2 = ConvGemm().prepare(node2, ins2, outs2)
        n, c, width = ins[0].shape
        m, ow = outs[0].shape[1], outs[0].shape[2]

        def run(inputs, outputs):
            out = outputs[0]
            out4 = None if out is None else out.reshape(n, m, 1, ow)
            y = run2([inputs[0].reshape(n, c, 1, width), *inputs[1:]], [out4])[0]
            return (out if out4 is not None and y is out4 else y.reshape(n, m, ow),)

        return run


IMPLEMENTATIONS = (ConvIm2colPooled, ConvGemm, ConvWinograd, ConvGemmNHWC, ConvWinogradNHWC, ConvDynamic,
                   ConvDynamicNHWC, Conv1dGemm)
