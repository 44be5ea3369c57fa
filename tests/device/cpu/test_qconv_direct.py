"""The direct integer convolution (qkernels.c ``direct_rows``: a tile's rows read the NHWC codes in place, no
packed A; int8 codes flipped as they are loaded), with and without a fused table: bit for bit the packed path's
results (``NNHAL_QCONV_DIRECT=0``), onnx.reference's QLinearConv, an int64 reference and the lookup after the
convolution, on int8 and uint8 codes, odd sizes, pads, strides 1 and 2, dilation, channel counts that are not
multiples of 8 or 16, extreme codes and two threads; again with the avx2 and portable instruction sets forced
(NNHAL_QGEMM_ISA)."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.device.cpu import qnative
from tests.device.cpu.isa_rerun import rerun_under_isa
from tests.device.cpu.test_qkernels import _conv_case, _float32_rescale, _narrow, _rand

pytestmark = pytest.mark.skipif(not qnative.status().available,
                                reason=f"integer kernels not loaded: {qnative.status().reason}")

# (n, c, h, w, m, kh, kw, stride, pad, dil): the detector's small-channel shapes in small, odd variants
CASES = [
    (1, 16, 13, 11, 16, 3, 3, 1, 1, 1),     # 16 -> 16 3x3: interior tiles direct, border tiles packed
    (2, 16, 9, 14, 32, 3, 3, 2, 1, 1),      # 16 -> 32 3x3 stride 2, two images
    (1, 48, 7, 9, 32, 1, 1, 1, 0, 1),       # 1x1 without pads: every row direct, tiles across image rows
    (2, 32, 5, 7, 19, 1, 1, 1, 0, 1),       # 1x1, N not a multiple of 8, across two images
    (1, 32, 8, 8, 33, 1, 1, 2, 0, 1),       # 1x1 stride 2
    (1, 12, 11, 10, 24, 3, 3, 1, 2, 2),     # dilated: one segment per tap
    (1, 4, 10, 9, 7, 5, 5, 1, 2, 1),        # 4 channels, a 5x5 kernel
    (1, 20, 6, 17, 40, 3, 1, 1, 1, 1),      # a 3x1 kernel
    (1, 6, 9, 9, 8, 3, 3, 1, 1, 1),         # 6 channels: a kernel row of 18 bytes, not whole K groups: packed
]


def _q():
    return qnative.kernels()


def _run(x, x_zero, packed, geometry, out_dtype, bias, factor, y_zero, rounding, threads, table=None, lo=-1e9):
    n, oh, ow, m = geometry[0], geometry[4], geometry[5], packed.n
    out = np.empty((n, oh, ow, m), out_dtype)
    args = (x, x_zero, packed, geometry, out, bias, factor, y_zero, lo, 1e9, rounding, threads)
    _q().conv(*args) if table is None else _q().conv(*args, table)
    return out


@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
@pytest.mark.parametrize("case", CASES)
def test_direct_equals_packed_and_onnx_reference(xdt, case, monkeypatch):
    rng = np.random.default_rng(sum(case) + 7)
    x, wt, x_zero, y_zero, bias, factor, geometry, want = _conv_case(rng, xdt, *case, narrow=True)
    m = wt.shape[0]
    packed = _q().pack_b(np.ascontiguousarray(wt.transpose(0, 2, 3, 1)), wt[0].size, m, None, 1)
    xt = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    rescaled = _float32_rescale(x, wt, x_zero, bias, factor, y_zero, geometry)
    for threads in (1, 2):
        for rounding, ref in ((0, want), (1, rescaled)):
            got = {}
            for direct in ("0", "1"):
                monkeypatch.setenv("NNHAL_QCONV_DIRECT", direct)
                got[direct] = _run(xt, x_zero.reshape(1), packed, geometry, xdt, bias, factor, int(y_zero),
                                   rounding, threads)
            np.testing.assert_array_equal(got["1"], got["0"])
            np.testing.assert_array_equal(got["1"].transpose(0, 3, 1, 2), ref)


def _int64_conv(x, x_zero, wt, w_zero, geometry):
    """The convolution's sums in int64 (NHWC codes, [M, KH, KW, C] weights)."""
    n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl = geometry
    m = wt.shape[0]
    xs = np.pad(x.astype(np.int64) - int(x_zero[0]), ((0, 0), (pt, kh * dh), (pl, kw * dw), (0, 0)))
    wz = wt.astype(np.int64) - w_zero.astype(np.int64).reshape(m, 1, 1, 1)
    acc = np.zeros((n, oh, ow, m), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            patch = xs[:, ky * dh:ky * dh + sh * oh:sh, kx * dw:kx * dw + sw * ow:sw]
            acc += np.einsum("nhwc,mc->nhwm", patch, wz[:, ky, kx])
    return acc


@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
@pytest.mark.parametrize("wdt,narrow", [(np.uint8, True), (np.int8, True), (np.uint8, False)])
@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[5]])
def test_direct_int32_sums_with_weight_zero_points_and_extreme_codes(xdt, wdt, narrow, case, monkeypatch):
    """Extreme codes (only the ends of the type) and per-channel weight zero points, whose d_n * rowsum term needs
    the row sums of the flipped bytes that direct_rows forms: int32 sums against int64, split over 3 parts."""
    n, c, h, w, m, kh, kw, stride, pad, dil = case
    rng = np.random.default_rng(sum(case) + narrow)
    x = _rand(rng, (n, h, w, c), xdt, extreme=True)
    x_zero = np.array(_rand(rng, (), xdt)).reshape(1)
    wt = _narrow(rng, (m, kh, kw, c), wdt, extreme=True) if narrow else _rand(rng, (m, kh, kw, c), wdt, True)
    w_zero = _rand(rng, m, wdt)
    packed = _q().pack_b(wt.reshape(m, -1), kh * kw * c, m, w_zero, 1)
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    geometry = (n, h, w, c, oh, ow, kh, kw, stride, stride, dil, dil, pad, pad)
    want = _int64_conv(x, x_zero, wt, w_zero, geometry)
    for direct in ("1", "0"):
        monkeypatch.setenv("NNHAL_QCONV_DIRECT", direct)
        out = np.empty((n, oh, ow, m), np.int32)
        _q().conv(x, x_zero, packed, geometry, out, None, None, 0, 0.0, 0.0, 0, 3)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("out_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("m", [16, 24, 32, 40, 13])
@pytest.mark.parametrize("threads", [1, 2])
def test_direct_with_a_table_equals_the_lookup_after(out_dtype, m, threads, monkeypatch):
    """A fused table in the direct convolution's write-back against table[codes] after the packed convolution,
    with and without a fused Relu's clamp; N = 13 has columns left over by the 8-wide epilogue."""
    rng = np.random.default_rng(m + threads)
    xdt = np.int8
    x, wt, x_zero, y_zero, bias, factor, geometry, _ = _conv_case(rng, xdt, 1, 16, 11, 9, m, 3, 3, 1, 1, 1,
                                                                   narrow=True)
    y_zero = np.array(_rand(rng, (), out_dtype))
    packed = _q().pack_b(np.ascontiguousarray(wt.transpose(0, 2, 3, 1)), wt[0].size, m, None, 1)
    xt = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    table = _rand(rng, 256, out_dtype)
    for lo in (-1e9, float(y_zero)):
        monkeypatch.setenv("NNHAL_QCONV_DIRECT", "0")
        plain = _run(xt, x_zero.reshape(1), packed, geometry, out_dtype, bias, factor, int(y_zero), 1, threads, lo=lo)
        want = table[plain.view(np.uint8)]
        monkeypatch.setenv("NNHAL_QCONV_DIRECT", "1")
        got = _run(xt, x_zero.reshape(1), packed, geometry, out_dtype, bias, factor, int(y_zero), 1, threads,
                   table, lo=lo)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("isa", ["avx2", "portable"])
def test_isa_path(isa):
    """This file's tests again with NNHAL_QGEMM_ISA=isa, in a fresh process."""
    rerun_under_isa(__file__, isa, _q().available(), "direct")
