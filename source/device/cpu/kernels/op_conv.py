"""Conv on the CPU: N-d im2col + GEMM (reference) and the fast 2-D kernels.

reference: the input is padded into a buffer, windows are gathered with a
strided view, and each group is one matrix product with the weights packed at
prepare.

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

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from nnhal.device.cpu import threads
from nnhal.device.cpu.kernels import _conv2d, _scratch
from nnhal.device.cpu.kernels._conv_nhwc import ConvGemmNHWC, ConvWinogradNHWC
from nnhal.device.cpu.kernels.base import Kernel, RunFn, store
from nnhal.operator.table import get_prototype


def im2col(x: np.ndarray, kernel: list[int], strides: list[int], dilations: list[int],
           pads: list[int]) -> tuple[np.ndarray, list[int]]:
    """Windows of x (N, C, *S) as a view (N, C, *out, *kernel) after padding."""
    n = len(kernel)
    if any(pads):
        width = [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)]
        x = np.pad(x, width)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    win = sliding_window_view(x, spans, axis=tuple(range(2, 2 + n)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) \
        + tuple(slice(None, None, d) for d in dilations)
    win = win[index]
    return win, list(win.shape[2:2 + n])


class ConvIm2col(Kernel):
    op_type = "Conv"
    name = "reference"

    def prepare(self, node, ins, outs) -> RunFn:
        proto = get_prototype("", "Conv")
        group = node.attrs["group"]
        has_bias = len(ins) > 2 and ins[2] is not None
        x_info, w_info = ins[0], ins[1]
        dtype = outs[0].dtype
        packed: dict[str, np.ndarray] = {}
        if w_info.value is not None:
            packed["w"] = _pack(w_info.value, group)

        def run(inputs, outputs):
            x, w = inputs[0], inputs[1]
            if "w" not in packed:       # weights known only now: check them as inference would have
                proto.check_operands(node, x.shape, w.shape)
            g = proto.geometry(node, x.shape, w.shape)
            wg = packed["w"] if "w" in packed else _pack(w, group)
            win, out_sizes = im2col(x, g["kernel"], g["strides"], g["dilations"], g["pads"])
            nb, c = x.shape[0], x.shape[1]
            nsp = len(out_sizes)
            # (N, C, *out, *k) -> (N, G, C/G * prod(k), prod(out))
            perm = (0, 1, *range(2 + nsp, 2 + 2 * nsp), *range(2, 2 + nsp))
            cols = np.ascontiguousarray(win.transpose(perm)).reshape(nb, group, -1, int(np.prod(out_sizes)))
            y = np.matmul(wg[None], cols)  # (N, G, M/G, P)
            y = y.reshape(nb, w.shape[0], *out_sizes)
            if has_bias:
                y += inputs[2].reshape((1, -1) + (1,) * nsp)
            return (store(y, outputs[0], dtype),)

        return run


def _pack(w: np.ndarray, group: int) -> np.ndarray:
    """Weights (M, C/G, *k) -> (G, M/G, C/G * prod(k))."""
    m = w.shape[0]
    return np.ascontiguousarray(w.reshape(group, m // group, -1))


# scratch bound of one im2col band (bytes); bigger convolutions run in bands of output rows
BAND_BYTES = 6 << 20
# Splitting a convolution over the session's threads (threads.parallel; GEMM parts on single-threaded
# BLAS, element-wise parts beside OpenBLAS's threads) is measured and OFF: on an idle 2-core machine one
# GEMM on OpenBLAS's own threads was faster (ResNet-50 55 ms against 74 ms: the idle OpenBLAS workers
# spin against the pool thread), and even element-wise splits (depthwise taps, bias/activation, BN,
# pooling) lost 1-5 %. On a loaded machine the GEMM split was the steadier one (no 10-30x stalls);
# lower these to try it. Smallest multiply-adds of a split GEMM, elements of a split epilogue,
# multiply-adds of a split depthwise convolution:
PARALLEL_MIN_MACS = 1 << 62
PARALLEL_MIN_EPILOGUE = 1 << 62
PARALLEL_MIN_DEPTHWISE = 1 << 62
# output-side shifts instead of im2col when output channels <= this times input channels
SHIFT_MAX_RATIO = 1.0
# ... and when the padded map is at most this much larger than the output (the shift GEMM runs over it all;
# on 7x7 or 14x14 maps the border costs more than im2col's copies)
SHIFT_MAX_PAD_GROWTH = 1.2


class ConvGemm(Kernel):
    """2-D convolution, constant weights, static shapes: GEMM without im2col for 1x1, im2col bands else."""

    op_type = "Conv"
    name = "gemm"
    fuse_activation = True

    def score(self, node, ins, outs) -> int:
        return 10 if _conv2d.geometry(node, ins, outs) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        g = _conv2d.geometry(node, ins, outs)
        wv = ins[1].value
        dtype = outs[0].dtype
        n, c, h, w_in = ins[0].shape
        m = wv.shape[0]
        group = node.attrs["group"]
        cg, mg = c // group, m // group
        kh, kw = g["kernel"]
        sh, sw = g["strides"]
        dh, dw = g["dilations"]
        pt, pl, pb, pr = g["pads"]
        oh, ow = outs[0].shape[2:]
        p = oh * ow
        bias = ins[2].value.astype(dtype).reshape(m, 1, 1) if len(ins) > 2 and ins[2] is not None else None
        act = _scratch.activation_of(node)
        out_shape = tuple(outs[0].shape)

        def finish(y, lo=None, hi=None, trail=2):
            """Bias and activation in y, or in its output channels lo:hi (the channel axis then has ``trail``
            axes after it)."""
            if bias is not None:
                bb = bias if lo is None else bias[lo:hi].reshape((hi - lo,) + (1,) * trail)
                np.add(y, bb, out=y)
            _scratch.apply_activation(y, act)
            return (y,)

        # ---------------------------------------------------------- 1x1
        if kh == kw == 1 and not any(g["pads"]):
            wp = np.ascontiguousarray(wv.reshape(group, mg, cg))
            w2 = wp[0]
            strided = (sh, sw) != (1, 1)
            parts = [((n, c, oh, ow), dtype)] if strided else []
            if parts:
                _scratch.reserve(_scratch.nbytes_of(*parts))

            def run_1x1(inputs, outputs):
                x = inputs[0]
                y = outputs[0] if outputs[0] is not None else np.empty(out_shape, dtype)
                if strided:
                    (xs,) = _scratch.scratch(*parts)
                    np.copyto(xs, x[:, :, :(oh - 1) * sh + 1:sh, :(ow - 1) * sw + 1:sw])
                    x = xs
                if group == 1:
                    # one GEMM on BLAS's own threads: the zoo's shipped-output tests pin its rounding
                    # (a split over rows or columns on single-threaded BLAS changes the last bits)
                    if n == 1:
                        np.matmul(w2, x.reshape(c, p), out=y.reshape(m, p))
                    else:
                        np.matmul(w2, x.reshape(n, c, p), out=y.reshape(n, m, p))
                    if n * m * p >= PARALLEL_MIN_EPILOGUE and threads.workers() > 1 and (bias is not None or act):
                        yr = y.reshape(n, m, p)
                        threads.parallel(lambda r: finish(yr[:, r[0]:r[1]], r[0], r[1], 1),
                                         threads.split(m, threads.workers(), 8), blas=False)
                        return (y,)
                else:
                    xg, yg = x.reshape(n, group, cg, p), y.reshape(n, group, mg, p)
                    if m * cg * p * n >= PARALLEL_MIN_MACS and threads.workers() > 1 and group > 1:
                        yr = y.reshape(n, m, p)

                        def part_g(r):
                            g0, g1 = r
                            np.matmul(wp[g0:g1], xg[:, g0:g1], out=yg[:, g0:g1])
                            finish(yr[:, g0 * mg:g1 * mg], g0 * mg, g1 * mg, 1)

                        threads.parallel(part_g, threads.split(group, threads.workers()))
                        return (y,)
                    np.matmul(wp, xg, out=yg)
                return finish(y)

            return run_1x1

        hp, wpad = h + pt + pb, w_in + pl + pr
        padded = any(g["pads"])

        def pad_into(xp, x):
            """x (.., H, W) into the scratch xp (.., Hp, Wp) with zero borders."""
            if pt:
                xp[..., :pt, :] = 0
            if pb:
                xp[..., pt + h:, :] = 0
            if pl:
                xp[..., pt:pt + h, :pl] = 0
            if pr:
                xp[..., pt:pt + h, pl + w_in:] = 0
            xp[..., pt:pt + h, pl:pl + w_in] = x

        def tap(i, j, r0=0, r1=oh):
            """Index of kernel tap (i, j) over output rows r0..r1 in the padded input's last two axes."""
            top = i * dh + r0 * sh
            return (Ellipsis, slice(top, top + (r1 - r0 - 1) * sh + 1, sh),
                    slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))

        # ---------------------------------------------------------- depthwise
        if cg == 1 and mg == 1:
            wd = np.ascontiguousarray(wv.reshape(c, kh * kw).T).reshape(kh * kw, 1, c, 1, 1)
            parts = ([((n, c, hp, wpad), dtype)] if padded else []) + [((n, c, oh, ow), dtype)]
            _scratch.reserve(_scratch.nbytes_of(*parts))
            taps = [(i, j, tap(i, j)) for i in range(kh) for j in range(kw)]

            big = n * c * p * kh * kw >= PARALLEL_MIN_DEPTHWISE

            def run_dw(inputs, outputs):
                x = inputs[0]
                y = outputs[0] if outputs[0] is not None else np.empty(out_shape, dtype)
                bufs = _scratch.scratch(*parts)
                tmp = bufs[-1]
                if padded:
                    pad_into(bufs[0], x)
                    x = bufs[0]

                def part(rng):
                    lo, hi = rng
                    xs, ys, ts = x[:, lo:hi], y[:, lo:hi], tmp[:, lo:hi]
                    for k, (i, j, index) in enumerate(taps):
                        wk = wd[k][:, lo:hi]
                        if k == 0:
                            np.multiply(xs[index], wk, out=ys)
                        else:
                            np.multiply(xs[index], wk, out=ts)
                            np.add(ys, ts, out=ys)
                    finish(ys, lo, hi)

                threads.parallel(part, threads.split(c, threads.workers() if big else 1, 8), blas=False)
                return (y,)

            return run_dw

        # ---------------------------------------------------------- output-side shifts (few output channels)
        if group == 1 and (sh, sw) == (1, 1) and kh * kw > 1 and m <= SHIFT_MAX_RATIO * c \
                and hp * wpad <= SHIFT_MAX_PAD_GROWTH * p:
            # Z = W_taps (kh*kw*M, C) @ xp (C, Hp*Wp) in one GEMM; y = sum over taps of shifted Z slices.
            # Cheaper than im2col when M < C: Z has kh*kw*M rows where im2col has kh*kw*C.
            wt = np.ascontiguousarray(wv.transpose(2, 3, 0, 1).reshape(kh * kw * m, c))
            parts = ([((c, hp, wpad), dtype)] if padded else []) + [((kh * kw, m, hp, wpad), dtype)]
            _scratch.reserve(_scratch.nbytes_of(*parts))
            shifts = [(i * kw + j, slice(i * dh, i * dh + oh), slice(j * dw, j * dw + ow))
                      for i in range(kh) for j in range(kw)]

            big = n * m * c * hp * wpad * kh * kw >= PARALLEL_MIN_MACS
            packed_by_width: dict[int, list] = {}

            def packed(width):
                """[(lo, hi, weights of output channels lo:hi as (taps * (hi - lo), C))] for a split width."""
                if width not in packed_by_width:
                    w4 = wt.reshape(kh * kw, m, c)
                    packed_by_width[width] = [(lo, hi, np.ascontiguousarray(w4[:, lo:hi]).reshape(-1, c))
                                              for lo, hi in threads.split(m, width, 8)]
                return packed_by_width[width]

            def run_shift(inputs, outputs):
                x = inputs[0]
                y = outputs[0] if outputs[0] is not None else np.empty(out_shape, dtype)
                bufs = _scratch.scratch(*parts)
                zall = bufs[-1].reshape(-1)
                chunks = packed(threads.workers() if big else 1)
                for b in range(n):
                    xb = x[b]
                    if padded:
                        pad_into(bufs[0], xb)
                        xb = bufs[0]
                    yb = y[b]

                    def part(chunk):
                        lo, hi, wh = chunk
                        mh = hi - lo
                        z = zall[kh * kw * lo * hp * wpad:kh * kw * hi * hp * wpad].reshape(kh * kw, mh, hp, wpad)
                        np.matmul(wh, xb.reshape(c, hp * wpad), out=z.reshape(kh * kw * mh, hp * wpad))
                        yo = yb[lo:hi]
                        t0, r0, c0 = shifts[0]
                        np.add(z[t0, :, r0, c0], z[shifts[1][0], :, shifts[1][1], shifts[1][2]], out=yo)
                        for t, r, cc in shifts[2:]:
                            np.add(yo, z[t, :, r, cc], out=yo)
                        finish(yo, lo, hi)

                    threads.parallel(part, chunks)
                return (y,)

            return run_shift

        # ---------------------------------------------------------- im2col bands
        kk = cg * kh * kw
        wp = np.ascontiguousarray(wv.reshape(group, mg, kk))
        rows = max(1, min(oh, BAND_BYTES // max(1, c * kh * kw * ow * dtype.itemsize)))
        bands = [(r0, min(oh, r0 + rows)) for r0 in range(0, oh, rows)]
        parts = ([((c, hp, wpad), dtype)] if padded else []) + [((c * kh * kw * rows * ow,), dtype)]
        _scratch.reserve(_scratch.nbytes_of(*parts))
        band_taps = [[(i, j, tap(i, j, r0, r1)) for i in range(kh) for j in range(kw)] for r0, r1 in bands]
        big = n * m * kk * p >= PARALLEL_MIN_MACS

        def run_im2col(inputs, outputs):
            x = inputs[0]
            y = outputs[0] if outputs[0] is not None else np.empty(out_shape, dtype)
            bufs = _scratch.scratch(*parts)
            cols_all = bufs[-1]
            width = threads.workers() if big else 1
            c_parts, m_parts = threads.split(c, width, 8), threads.split(m, width, 8)
            for b in range(n):
                xb = x[b]
                if padded:
                    pad_into(bufs[0], xb)
                    xb = bufs[0]
                yb = y[b].reshape(group, mg, p)
                for (r0, r1), taps in zip(bands, band_taps):
                    q = (r1 - r0) * ow
                    cols = cols_all[:c * kh * kw * q]
                    cols5 = cols.reshape(c, kh, kw, r1 - r0, ow)
                    if group == 1 and width > 1:
                        def gather(rng):
                            lo, hi = rng
                            xs = xb[lo:hi]
                            for i, j, index in taps:
                                np.copyto(cols5[lo:hi, i, j], xs[index])

                        def multiply(rng):
                            lo, hi = rng
                            yo = yb[0, lo:hi, r0 * ow:r1 * ow]
                            np.matmul(wp[0, lo:hi], cols.reshape(kk, q), out=yo)
                            finish(yo, lo, hi, 1)

                        threads.parallel(gather, c_parts)
                        threads.parallel(multiply, m_parts)
                        continue
                    for i, j, index in taps:
                        np.copyto(cols5[:, i, j], xb[index])
                    if group == 1:
                        np.matmul(wp[0], cols.reshape(kk, q), out=yb[0, :, r0 * ow:r1 * ow])
                    else:
                        np.matmul(wp, cols.reshape(group, kk, q), out=yb[:, :, r0 * ow:r1 * ow])
            return (y,) if group == 1 and width > 1 else finish(y)

        return run_im2col


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
        g = _conv2d.geometry(node, ins, outs)
        if g is None or node.attrs["group"] != 1 or list(g["kernel"]) != [3, 3]:
            return 0
        if list(g["strides"]) != [1, 1] or list(g["dilations"]) != [1, 1]:
            return 0
        m, c = ins[1].value.shape[:2]
        oh, ow = outs[0].shape[2:]
        if min(m, c) < WINOGRAD_MIN_CHANNELS or min(oh, ow) < WINOGRAD_MIN_OUT:
            return 0
        return 20

    def prepare(self, node, ins, outs) -> RunFn:
        g = _conv2d.geometry(node, ins, outs)
        wv = ins[1].value
        dtype = outs[0].dtype
        n, c, h, w_in = ins[0].shape
        m = wv.shape[0]
        pt, pl, pb, pr = g["pads"]
        oh, ow = outs[0].shape[2:]
        th, tw = -(-oh // 4), -(-ow // 4)
        hp, wpad = 4 * th + 2, 4 * tw + 2
        u = _conv2d.winograd_weights(wv, dtype)
        kb, ka = _conv2d.winograd_transforms(dtype)
        bias = ins[2].value.astype(dtype).reshape(m, 1, 1) if len(ins) > 2 and ins[2] is not None else None
        act = _scratch.activation_of(node)
        out_shape = tuple(outs[0].shape)
        item = np.dtype(dtype).itemsize
        rows = max(1, min(th, WINOGRAD_BAND_BYTES // max(1, 36 * max(c, m) * tw * item)))
        bands = [(t0, min(th, t0 + rows)) for t0 in range(0, th, rows)]
        nt = rows * tw
        exact_w = ow == 4 * tw
        parts = [((c, hp, wpad), dtype), ((36 * c * nt,), dtype), ((36 * c * nt,), dtype),
                 ((36 * m * nt,), dtype), ((16 * m * nt,), dtype)]
        if not (exact_w and oh == 4 * th):
            parts.append(((m * nt * 16,), dtype))
        _scratch.reserve(_scratch.nbytes_of(*parts))
        zero_rows = (slice(0, pt), slice(pt + h, hp))
        zero_cols = (slice(0, pl), slice(pl + w_in, wpad))
        big = 36 * m * c * th * tw >= PARALLEL_MIN_MACS

        def run_winograd(inputs, outputs):
            x = inputs[0]
            y = outputs[0] if outputs[0] is not None else np.empty(out_shape, dtype)
            bufs = _scratch.scratch(*parts)
            xp, dbuf, vbuf, zbuf, obuf = bufs[:5]
            crop = bufs[5] if len(bufs) > 5 else None
            sc, sh_, sw_ = xp.strides
            width = threads.workers() if big else 1
            c_parts = threads.split(c, width, 8)
            m_parts = threads.split(m, width, 8)
            for b in range(n):
                for r in zero_rows:
                    xp[:, r, :] = 0
                for cc in zero_cols:
                    xp[:, pt:pt + h, cc] = 0
                xp[:, pt:pt + h, pl:pl + w_in] = x[b]
                yb = y[b]
                ys = yb.strides
                for t0, t1 in bands:
                    nr = t1 - t0
                    k = nr * tw
                    d = dbuf[:36 * c * k].reshape(6, 6, c, nr, tw)
                    v = vbuf[:36 * c * k].reshape(36, c * k)
                    src = as_strided(xp[:, 4 * t0:, :], shape=(6, 6, c, nr, tw),
                                     strides=(sh_, sw_, sc, 4 * sh_, 4 * sw_), writeable=False)
                    r0, r1 = 4 * t0, min(oh, 4 * t1)

                    def transform_in(rng):
                        lo, hi = rng
                        np.copyto(d[:, :, lo:hi], src[:, :, lo:hi])
                        np.matmul(kb, d.reshape(36, c * k)[:, lo * k:hi * k], out=v[:, lo * k:hi * k])

                    def multiply_out(rng):
                        lo, hi = rng
                        mh = hi - lo
                        z = zbuf[36 * lo * k:36 * hi * k].reshape(36, mh, k)
                        np.matmul(u[:, lo:hi], v.reshape(36, c, k), out=z)
                        o = obuf[16 * lo * k:16 * hi * k].reshape(16, mh * k)
                        np.matmul(ka, z.reshape(36, mh * k), out=o)
                        tiles = o.reshape(4, 4, mh, nr, tw).transpose(2, 3, 0, 4, 1)  # (m, ti, r, tj, s)
                        if crop is None or exact_w and r1 == 4 * t1:
                            dst = as_strided(yb[lo:, r0:, :], shape=(mh, nr, 4, tw, 4),
                                             strides=(ys[0], 4 * ys[1], ys[1], 4 * ys[2], ys[2]))
                            np.copyto(dst, tiles)
                        else:
                            full = crop[16 * lo * k:16 * hi * k].reshape(mh, nr, 4, tw, 4)
                            np.copyto(full, tiles)
                            np.copyto(yb[lo:hi, r0:r1, :], full.reshape(mh, 4 * nr, 4 * tw)[:, :r1 - r0, :ow])
                        yo = yb[lo:hi, r0:r1, :]
                        if bias is not None:
                            np.add(yo, bias[lo:hi], out=yo)
                        _scratch.apply_activation(yo, act)

                    threads.parallel(transform_in, c_parts)
                    threads.parallel(multiply_out, m_parts)
            return (y,)

        return run_winograd


IMPLEMENTATIONS = (ConvIm2col, ConvGemm, ConvWinograd, ConvGemmNHWC, ConvWinogradNHWC)
