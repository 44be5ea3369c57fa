"""The cpu device's integer kernels (source/device/cpu/qnative): bit-exact against integer references.

Every instruction-set path runs: ``test_isa_path`` reruns this file's kernel tests in a subprocess with
NNHAL_QGEMM_ISA forcing the path (a path this CPU lacks skips, naming it). The sums are exact int32 and the
epilogues follow a fixed order of float operations, so every comparison is bit-equality.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx.reference.ops.op_qlinear_conv import QLinearConv
from onnx.reference.ops.op_qlinear_matmul import QLinearMatMul

from nnhal.device.cpu import qnative
from tests.device.cpu.isa_rerun import rerun_under_isa

ISAS = ("avx512vnni", "avxvnni", "avx2", "portable")

pytestmark = pytest.mark.skipif(not qnative.status().available,
                                reason=f"integer kernels not loaded: {qnative.status().reason}")


def _q():
    return qnative.kernels()


def _rand(rng, shape, dtype, extreme=False):
    info = np.iinfo(dtype)
    if extreme:       # only the two ends of the range: the largest products and sums
        return rng.choice(np.array([info.min, info.max], dtype), size=shape)
    return rng.integers(info.min, int(info.max) + 1, size=shape, dtype=dtype)


def _narrow(rng, shape, dtype, extreme=False):
    """Weights whose packed value (less the uint8 offset 128) lies in [-64, 64]: avx2's vpmaddubsw path."""
    offset = 0 if dtype == np.int8 else 128
    if extreme:       # only the two ends: the largest pair sums vpmaddubsw forms (255 * 64 * 2)
        return (rng.choice(np.array([-64, 64]), size=shape) + offset).astype(dtype)
    return (rng.integers(-64, 65, size=shape) + offset).astype(dtype)


def _expect_narrow(packed, narrow):
    """avx2 packs narrow weights for vpmaddubsw; the other paths do not distinguish them."""
    assert packed.narrow == (narrow and _q().isa() == "avx2"), (packed, _q().isa())


def _int_ref(a, za, b, zb):
    """(a - za) @ (b - zb) in int64, returned as int32 (the sums fit)."""
    aa = a.astype(np.int64) - (0 if za is None else za.astype(np.int64).reshape(-1, 1))
    bb = b.astype(np.int64) - (0 if zb is None else zb.astype(np.int64).reshape(1, -1))
    out = aa @ bb
    assert np.abs(out).max(initial=0) < 2 ** 31
    return out.astype(np.int32)


SHAPES = [(1, 1, 1), (3, 5, 7), (7, 17, 33), (9, 64, 32), (17, 67, 70), (33, 130, 31), (2, 3, 100),
          (40, 259, 65), (130, 48, 16)]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8),
                                     (np.int8, np.uint8)])
@pytest.mark.parametrize("narrow", [False, True])
def test_kernels_gemm_int32(m, k, n, adt, bdt, narrow):
    """narrow: weights in 7 bits (avx2: vpmaddubsw + vpmaddwd), extreme values included: activations at
    0 / 255 against weights at -64 / 64 give the largest pair sums vpmaddubsw forms, +-32640."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    for extreme in (False, True):
        a, b = _rand(rng, (m, k), adt, extreme), (_narrow if narrow else _rand)(rng, (k, n), bdt, extreme)
        za = _rand(rng, (m,), adt) if m > 1 else None
        zb = _rand(rng, (n,), bdt)
        for trans in (0, 1):
            packed = _q().pack_b(np.ascontiguousarray(b.T) if trans else b, k, n, zb, trans)
            if narrow:
                _expect_narrow(packed, True)
            out = np.empty((m, n), np.int32)
            bias = rng.integers(-1000, 1000, n, dtype=np.int32)
            _q().gemm(a, za, packed, out, bias, None, 0, 0.0, 0.0, 0, 1)
            np.testing.assert_array_equal(out, _int_ref(a, za, b, zb) + bias)


@pytest.mark.parametrize("m,k,n", [(13, 4099, 37), (6, 1030, 48), (12, 2, 16)])
@pytest.mark.parametrize("narrow", [False, True])
def test_kernels_gemm_extreme_long_k(m, k, n, narrow):
    """The largest products over a long K (the int32 sums near their bound) and whole 6 x 16 tiles."""
    rng = np.random.default_rng(k)
    for adt, bdt in ((np.uint8, np.int8), (np.int8, np.uint8)):
        a, b = _rand(rng, (m, k), adt, True), (_narrow if narrow else _rand)(rng, (k, n), bdt, True)
        zb = np.full(n, np.iinfo(bdt).min, bdt)
        packed = _q().pack_b(b, k, n, zb, 0)
        out = np.empty((m, n), np.int32)
        _q().gemm(a, None, packed, out, None, None, 0, 0.0, 0.0, 0, 2)
        np.testing.assert_array_equal(out, _int_ref(a, None, b, zb))


def test_kernels_gemm_threads_and_scalar_zero():
    rng = np.random.default_rng(5)
    m, k, n = 203, 129, 77
    a, b = _rand(rng, (m, k), np.uint8), _rand(rng, (k, n), np.int8)
    za, zb = np.array([131], np.uint8), np.array([-3], np.int8)
    packed = _q().pack_b(b, k, n, zb, 0)
    want = _int_ref(a, np.full(m, 131, np.uint8), b, np.full(n, -3, np.int8))
    for threads in (1, 2, 3, 8):
        out = np.empty((m, n), np.int32)
        _q().gemm(a, za, packed, out, None, None, 0, 0.0, 0.0, 0, threads)
        np.testing.assert_array_equal(out, want)
    few = np.empty((2, n), np.int32)       # few rows: split by column panels
    _q().gemm(a[:2], za, packed, few, None, None, 0, 0.0, 0.0, 0, 4)
    np.testing.assert_array_equal(few, want[:2])


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("adt,ydt", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
def test_kernels_qlinear_matmul_equals_onnx_reference(m, k, n, adt, ydt):
    rng = np.random.default_rng(7 * m + k + n)
    a, b = _rand(rng, (m, k), adt), _rand(rng, (k, n), np.int8)
    a_scale, b_scale = np.float32(rng.uniform(0.001, 0.05)), np.float32(rng.uniform(0.001, 0.05))
    a_zero, b_zero = np.array(_rand(rng, (), adt)), np.array(0, np.int8)
    y_scale = np.float32(rng.uniform(0.05, 2.0) * a_scale * b_scale * np.sqrt(k) * 128)
    y_zero = np.array(_rand(rng, (), ydt))
    want = QLinearMatMul._run(None, a, np.array(a_scale), a_zero, b, np.array(b_scale), b_zero,
                              np.array(y_scale), y_zero)[0]
    factor = np.full(n, np.array(a_scale) * np.array(b_scale) / np.array(y_scale), np.float32)
    packed = _q().pack_b(b, k, n, b_zero.reshape(1), 0)
    out = np.empty((m, n), ydt)
    _q().gemm(a, a_zero.reshape(1), packed, out, None, factor, int(y_zero), -1e9, 1e9, 0, 2)
    np.testing.assert_array_equal(out, want)
    # a fused Relu: the lower bound is the zero point
    relu = np.empty((m, n), ydt)
    _q().gemm(a, a_zero.reshape(1), packed, relu, None, factor, int(y_zero), float(y_zero), 1e9, 0, 1)
    np.testing.assert_array_equal(relu, np.maximum(want, y_zero))


@pytest.mark.parametrize("m,k,n", SHAPES[:6])
def test_kernels_gemm_dequantized_float(m, k, n):
    rng = np.random.default_rng(11 * m + n)
    a, b = _rand(rng, (m, k), np.uint8), _rand(rng, (n, k), np.int8)
    za = np.array([rng.integers(0, 256)], np.uint8)
    scale = rng.uniform(1e-4, 1e-2, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    packed = _q().pack_b(b, k, n, None, 1)
    out = np.empty((m, n), np.float32)
    _q().gemm(a, za, packed, out, bias, scale, 0, 0.0, 6.0, 0, 1)
    acc = _int_ref(a, np.full(m, za[0]), b.T, None)
    want = np.clip(acc.astype(np.float32) * scale + bias, np.float32(0), np.float32(6))
    np.testing.assert_array_equal(out, want)


def _dynamic_ref(x, w, signed, scale_w, bias):
    """DynamicQuantizeGemm's definition (operator/nn_dynamic_quantize_gemm.py), float32 as numpy runs it."""
    if signed:
        peak = np.abs(x).max(axis=1, keepdims=True)
        sx = np.where(peak > 0, peak / np.float32(127), np.float32(1)).astype(np.float32)
        xq = np.clip(np.rint(x / sx), -127, 127).astype(np.int64)
        zero = np.zeros_like(xq[:, :1])
    else:
        lo = np.minimum(x.min(axis=1, keepdims=True), 0)
        hi = np.maximum(x.max(axis=1, keepdims=True), 0)
        sx = np.where(hi > lo, (hi - lo) / np.float32(255), np.float32(1)).astype(np.float32)
        zero = np.rint(-lo / sx)
        xq = np.clip(np.rint(x / sx) + zero, 0, 255).astype(np.int64)
        zero = zero.astype(np.int64)
    acc = ((xq - zero) @ w.T.astype(np.int64)).astype(np.int32)
    return acc.astype(np.float32) * sx * scale_w + bias


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("signed", [True, False])
def test_kernels_gemm_dynamic_per_row(m, k, n, signed):
    rng = np.random.default_rng(3 * m + k)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10, (m, 1))).astype(np.float32)
    if m > 2:
        x[1] = 0.0                       # a zero row: scale 1
        x[2] = np.abs(x[2])              # a row with no negative values
    w = _rand(rng, (n, k), np.int8)
    w[0] = 127
    scale_w = rng.uniform(1e-3, 1e-2, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    packed = _q().pack_b(w, k, n, None, 1)
    out = np.empty((m, n), np.float32)
    _q().gemm_dynamic(x, int(signed), packed, out, bias, scale_w, -np.inf, np.inf, 2)
    np.testing.assert_array_equal(out, _dynamic_ref(x, w, signed, scale_w, bias))


def _conv_case(rng, xdt, n, c, h, w, m, kh, kw, stride, pad, dil, group=1, narrow=False):
    x = _rand(rng, (n, c, h, w), xdt)
    wt = (_narrow if narrow else _rand)(rng, (m, c // group, kh, kw), np.int8)
    x_scale, y_scale = np.array(0.02, np.float32), np.array(0.3, np.float32)
    w_scale = rng.uniform(0.005, 0.02, m).astype(np.float32)
    x_zero, y_zero = np.array(_rand(rng, (), xdt)), np.array(_rand(rng, (), xdt))
    bias = rng.integers(-5000, 5000, m, dtype=np.int32)
    attrs = {"auto_pad": "NOTSET", "dilations": [dil, dil], "group": group, "kernel_shape": [kh, kw],
             "pads": [pad] * 4, "strides": [stride, stride]}
    want = QLinearConv._run(None, x, x_scale, x_zero, wt, w_scale, np.array(0, np.int8), y_scale, y_zero, bias,
                            **attrs)[0]
    oh, ow = want.shape[2:]
    geometry = (n, h, w, c, oh, ow, kh, kw, stride, stride, dil, dil, pad, pad)
    factor = (x_scale * w_scale / y_scale).astype(np.float32)
    return x, wt, x_zero, y_zero, bias, factor, geometry, want


def _float32_rescale(x, wt, x_zero, bias, factor, y_zero, geometry):
    """The convolution's exact int32 sums (int64 in numpy), then the rescale in float32: float32(sum) * factor,
    rounded half to even, + zero, saturated."""
    n, _, _, _, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl = geometry
    xs = np.pad(x.astype(np.int64) - int(x_zero), ((0, 0), (0, 0), (pt, kh * dh), (pl, kw * dw)))
    acc = np.zeros((n, wt.shape[0], oh, ow), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            patch = xs[:, :, ky * dh:ky * dh + sh * oh:sh, kx * dw:kx * dw + sw * ow:sw]
            acc += np.einsum("nchw,mc->nmhw", patch, wt[:, :, ky, kx].astype(np.int64))
    acc += bias.reshape(1, -1, 1, 1)
    y = np.rint(acc.astype(np.int32).astype(np.float32) * factor.reshape(1, -1, 1, 1)) + np.float32(y_zero)
    info = np.iinfo(y_zero.dtype)
    return np.clip(y, info.min, info.max).astype(y_zero.dtype)


@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
@pytest.mark.parametrize("case", [(1, 3, 7, 9, 5, 3, 3, 1, 1, 1), (2, 8, 6, 6, 33, 3, 3, 2, 1, 1),
                                  (1, 5, 9, 8, 16, 1, 1, 1, 0, 1), (1, 4, 10, 10, 7, 3, 3, 1, 2, 2),
                                  (1, 17, 5, 5, 40, 5, 5, 1, 2, 1), (1, 3, 20, 17, 8, 7, 7, 2, 3, 1)])
def test_kernels_qlinear_conv_equals_onnx_reference(xdt, case):
    rng = np.random.default_rng(sum(case))
    x, wt, x_zero, y_zero, bias, factor, geometry, want = _conv_case(rng, xdt, *case)
    m = wt.shape[0]
    packed = _q().pack_b(np.ascontiguousarray(wt.transpose(0, 2, 3, 1)), wt[0].size, m, None, 1)
    out = np.empty((geometry[0], geometry[4], geometry[5], m), xdt)
    _q().conv(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), x_zero.reshape(1), packed, geometry, out, bias, factor,
              int(y_zero), -1e9, 1e9, 0, 2)
    np.testing.assert_array_equal(out.transpose(0, 3, 1, 2), want)
    # rounding 1: the rescale in float32, as onnxruntime's (and nnhal's numpy) QLinearConv
    _q().conv(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), x_zero.reshape(1), packed, geometry, out, bias, factor,
              int(y_zero), -1e9, 1e9, 1, 2)
    rescaled = _float32_rescale(x, wt, x_zero, bias, factor, y_zero, geometry)
    np.testing.assert_array_equal(out.transpose(0, 3, 1, 2), rescaled)
    # a fused Relu: the clamp at the zero point, on both roundings
    for rounding, ref in ((0, want), (1, rescaled)):
        _q().conv(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), x_zero.reshape(1), packed, geometry, out, bias,
                  factor, int(y_zero), float(y_zero), 1e9, rounding, 2)
        np.testing.assert_array_equal(out.transpose(0, 3, 1, 2), np.maximum(ref, y_zero))


@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
@pytest.mark.parametrize("case", [(1, 8, 7, 9, 3, 1, 1, 1), (2, 37, 6, 6, 3, 2, 1, 1), (1, 64, 9, 8, 5, 1, 2, 1),
                                  (1, 16, 10, 10, 3, 1, 2, 2)])
def test_kernels_depthwise_equals_onnx_reference(xdt, case):
    n, c, h, w, k, stride, pad, dil = case
    rng = np.random.default_rng(sum(case) + 1)
    x, wt, x_zero, y_zero, bias, factor, geometry, want = _conv_case(rng, xdt, n, c, h, w, c, k, k, stride, pad, dil,
                                                                    group=c)
    taps = np.ascontiguousarray(wt[:, 0].transpose(1, 2, 0)).astype(np.int16)      # [kh, kw, c]
    out = np.empty((n, geometry[4], geometry[5], c), xdt)
    _q().dwconv(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), x_zero.reshape(1), taps, geometry, out, bias,
                factor, int(y_zero), -1e9, 1e9, 0, 2)
    np.testing.assert_array_equal(out.transpose(0, 3, 1, 2), want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape,b_shape", [((3, 5, 7), (3, 5, 7)), ((3, 5, 7), (7,)), ((2, 3), (1,)),
                                           ((600, 1000), (1000,)), ((1,), (1,))])
def test_kernels_tables_gather_by_bytes(shape, b_shape, dtype):
    rng = np.random.default_rng(len(shape) + b_shape[0])
    a, b = _rand(rng, shape, dtype), _rand(rng, b_shape, dtype)
    t1, t2 = _rand(rng, 256, dtype), _rand(rng, 65536, dtype)
    index = a.view(np.uint8).astype(np.int64)
    out = np.empty(shape, dtype)
    _q().table1(a, t1, out, 2)                          # 600 x 1000: split over two parts
    np.testing.assert_array_equal(out, t1[index])
    _q().table2(a, b, t2, out, 2)
    np.testing.assert_array_equal(out, t2[index << 8 | np.broadcast_to(b, shape).view(np.uint8)])
    channels = _rand(rng, (shape[-1], 256), dtype)       # one table per channel of the last axis
    _q().table1(a, channels, out, 2)
    np.testing.assert_array_equal(out, channels[np.arange(shape[-1]), index])
    _q().table1(a, t1, a, 1)                            # in place
    np.testing.assert_array_equal(a, t1[index])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("mul", [0, 1])
@pytest.mark.parametrize("params", [(0.021, 3, 0.013, 250, 0.017, 128), (0.5, 128, 0.25, 0, 0.001, 255),
                                    (1e-3, 0, 3e-3, 17, 7.0, 9), (0.0371, 200, 0.0371, 200, 0.0371, 200)])
def test_kernels_binary_equals_the_reference_kernels(dtype, mul, params):
    """``binary`` (QLinearAdd / QLinearMul computed) equals the numpy reference kernels on every pair of codes,
    with saturating and rounding-tie parameters, b repeating along a, odd lengths (vector body and tail),
    two parts and in place."""
    from nnhal.hostkernels.ms_qlinear_add import QLinearAddKernel
    from nnhal.hostkernels.ms_qlinear_mul import QLinearMulKernel

    sa, za, sb, zb, sy, zy = params
    if dtype == np.int8:
        za, zb, zy = za - 128, zb - 128, zy - 128
    reference = (QLinearMulKernel() if mul else QLinearAddKernel()).compute

    def want(a, b):
        b = np.broadcast_to(b.reshape((1,) * (a.ndim - b.ndim) + b.shape), a.shape)
        return reference(None, a, np.float32(sa), dtype(za), b, np.float32(sb), dtype(zb), np.float32(sy), dtype(zy))

    codes = np.arange(256, dtype=np.uint8).view(dtype)
    a_all, b_all = np.repeat(codes, 256), np.tile(codes, 256)
    operands = (mul, sa, za, sb, zb, sy, zy)
    out = np.empty(65536, dtype)
    _q().binary(a_all, b_all, out, *operands, 1)
    np.testing.assert_array_equal(out, want(a_all, b_all))
    rng = np.random.default_rng(int(sy * 1000) + mul)
    for shape, b_shape, threads in (((3, 5, 7), (3, 5, 7), 1), ((3, 5, 7), (7,), 1), ((2, 13), (1,), 1),
                                    ((600, 1000), (1000,), 2), ((5, 17), (5, 17), 2), ((1,), (1,), 1)):
        a, b = _rand(rng, shape, dtype), _rand(rng, b_shape, dtype)
        out = np.empty(shape, dtype)
        _q().binary(a, b, out, *operands, threads)
        np.testing.assert_array_equal(out, want(a, b))
        expected = want(a, b)
        _q().binary(a, b, a, *operands, threads)         # in place
        np.testing.assert_array_equal(a, expected)


def test_kernels_binary_refuses_bad_arguments():
    a, b = np.zeros(6, np.uint8), np.zeros(4, np.uint8)
    with pytest.raises(ValueError, match="binary: argument 'b' has 4 elements"):
        _q().binary(a, b, np.empty(6, np.uint8), 0, 1.0, 0, 1.0, 0, 1.0, 0, 1)
    with pytest.raises(TypeError, match="binary: argument 'b'"):
        _q().binary(a, np.zeros(6, np.int8), np.empty(6, np.uint8), 0, 1.0, 0, 1.0, 0, 1.0, 0, 1)
    with pytest.raises(ValueError, match="binary: argument 'out' overlaps argument 'b'"):
        _q().binary(a, a[:3], a[:6], 0, 1.0, 0, 1.0, 0, 1.0, 0, 1)
    with pytest.raises(ValueError, match="binary: argument 'mul' is 2"):
        _q().binary(a, a, np.empty(6, np.uint8), 2, 1.0, 0, 1.0, 0, 1.0, 0, 1)


@pytest.mark.parametrize("outlier", [-65, 65, -128, 127])
def test_kernels_one_weight_outside_7_bits_is_split_or_wide(outlier):
    """One weight beyond [-64, 64]: not narrow; avx2 splits it (its K pair is the last, with the padding: W2
    stays empty) or, with split=0, packs the whole matrix wide; exact either way (tests/device/cpu/
    test_qkernels_split.py tests the split itself)."""
    rng = np.random.default_rng(abs(outlier))
    m, k, n = 7, 37, 19
    a = np.full((m, k), 255, np.uint8)
    b = _narrow(rng, (k, n), np.int8, True)
    b[k - 1, n - 1] = outlier
    for split in (-1, 0):
        packed = _q().pack_b(b, k, n, None, 0, 0, split)
        _expect_narrow(packed, False)
        assert packed.split == (split == -1 and _q().isa() == "avx2"), packed
        out = np.empty((m, n), np.int32)
        _q().gemm(a, None, packed, out, None, None, 0, 0.0, 0.0, 0, 1)
        np.testing.assert_array_equal(out, _int_ref(a, None, b, None))


@pytest.mark.parametrize("m,k,n", SHAPES[:6])
@pytest.mark.parametrize("signed", [True, False])
def test_kernels_gemm_dynamic_narrow_weights(m, k, n, signed):
    rng = np.random.default_rng(5 * m + k)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10, (m, 1))).astype(np.float32)
    w = _narrow(rng, (n, k), np.int8)
    w[0] = 64
    scale_w = rng.uniform(1e-3, 1e-2, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    packed = _q().pack_b(w, k, n, None, 1)
    _expect_narrow(packed, True)
    out = np.empty((m, n), np.float32)
    _q().gemm_dynamic(x, int(signed), packed, out, bias, scale_w, -np.inf, np.inf, 2)
    np.testing.assert_array_equal(out, _dynamic_ref(x, w, signed, scale_w, bias))


@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
@pytest.mark.parametrize("case", [(1, 3, 7, 9, 5, 3, 3, 1, 1, 1), (2, 8, 6, 6, 33, 3, 3, 2, 1, 1),
                                  (1, 17, 5, 5, 40, 5, 5, 1, 2, 1)])
def test_kernels_qlinear_conv_narrow_weights_equals_onnx_reference(xdt, case):
    rng = np.random.default_rng(sum(case) + 2)
    x, wt, x_zero, y_zero, bias, factor, geometry, want = _conv_case(rng, xdt, *case, narrow=True)
    m = wt.shape[0]
    packed = _q().pack_b(np.ascontiguousarray(wt.transpose(0, 2, 3, 1)), wt[0].size, m, None, 1)
    _expect_narrow(packed, True)
    out = np.empty((geometry[0], geometry[4], geometry[5], m), xdt)
    for rounding, ref in ((0, want), (1, _float32_rescale(x, wt, x_zero, bias, factor, y_zero, geometry))):
        _q().conv(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), x_zero.reshape(1), packed, geometry, out, bias,
                  factor, int(y_zero), -1e9, 1e9, rounding, 2)
        np.testing.assert_array_equal(out.transpose(0, 3, 1, 2), ref)


@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
@pytest.mark.parametrize("wdt,narrow", [(np.uint8, False), (np.int8, False), (np.uint8, True), (np.int8, True)])
@pytest.mark.parametrize("c,k,stride,pad", [(3, 3, 2, 1), (6, 1, 1, 0), (11, 3, 1, 1)])
def test_kernels_conv_with_weight_zero_points_is_exact(xdt, wdt, narrow, c, k, stride, pad):
    """Weight zero points (uint8 weights, per channel) need the row sums of the packed A, which the conv packer
    forms only then: int32 sums against an int64 reference, on taps of 3, 6 and 33 bytes (the inline copies'
    short, 8-byte and overlapping-tail moves), two images split over 3 parts mid-image."""
    rng = np.random.default_rng(c * 10 + k + narrow)
    n, h, w, m = 2, 13, 11, 19
    x = _rand(rng, (n, h, w, c), xdt)
    x_zero = np.array(_rand(rng, (), xdt)).reshape(1)
    wt = (_narrow(rng, (m, k, k, c), wdt) if narrow else _rand(rng, (m, k, k, c), wdt)).reshape(m, -1)
    w_zero = _rand(rng, m, wdt)
    packed = _q().pack_b(wt, k * k * c, m, w_zero, 1)
    _expect_narrow(packed, narrow)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    out = np.empty((n, oh, ow, m), np.int32)
    _q().conv(x, x_zero, packed, (n, h, w, c, oh, ow, k, k, stride, stride, 1, 1, pad, pad), out, None, None, 0,
              0.0, 0.0, 0, 3)
    xs = np.pad(x.astype(np.int64) - int(x_zero[0]), ((0, 0), (pad, pad + k), (pad, pad + k), (0, 0)))
    want = np.zeros((n, oh, ow, m), np.int64)
    wz = wt.astype(np.int64).reshape(m, k, k, c) - w_zero.astype(np.int64).reshape(m, 1, 1, 1)
    for ky in range(k):
        for kx in range(k):
            patch = xs[:, ky:ky + stride * oh:stride, kx:kx + stride * ow:stride]
            want += np.einsum("nhwc,mc->nhwm", patch, wz[:, ky, kx])
    np.testing.assert_array_equal(out, want)


def test_kernels_forced_isa_is_used():
    forced = os.environ.get("NNHAL_QGEMM_ISA")
    if forced:
        assert _q().isa() == forced
        assert _q().pack_b(np.zeros((4, 4), np.int8), 4, 4, None, 0).isa == forced
    assert _q().describe().startswith(_q().isa())


@pytest.mark.parametrize("isa", ISAS)
def test_isa_path(isa):
    """This file's kernel tests again with NNHAL_QGEMM_ISA=isa, in a fresh process."""
    rerun_under_isa(__file__, isa, _q().available(), "kernels")


def test_unavailable_forced_isa_is_a_clear_error():
    missing = [isa for isa in ISAS if isa not in _q().available()]
    script = textwrap.dedent("""
        from nnhal.device.cpu import qnative
        from nnhal.errors import DeviceError
        try:
            qnative.available()
        except DeviceError as exc:
            print("ERROR", exc)
    """)
    for isa in missing + ["sse9"]:
        run = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, NNHAL_QGEMM_ISA=isa),
                             check=False, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert "ERROR" in run.stdout and f"NNHAL_QGEMM_ISA={isa}" in run.stdout, run.stdout


FUZZ = textwrap.dedent("""
    import numpy as np
    from nnhal.device.cpu import qnative
    q = qnative.kernels()
    a = np.zeros((8, 16), np.uint8)
    w = np.zeros((16, 4), np.int8)
    p = q.pack_b(w, 16, 4, None, 0)
    out = np.zeros((8, 4), np.int32)
    t1, t2, b8 = np.zeros(256, np.uint8), np.zeros(65536, np.uint8), np.zeros((8, 16), np.uint8)
    bad = {
        "a float": lambda: q.gemm(a.astype(np.float32), None, p, out, None, None, 0, 0.0, 0.0, 0, 1),
        "a None": lambda: q.gemm(None, None, p, out, None, None, 0, 0.0, 0.0, 0, 1),
        "a list": lambda: q.gemm([1, 2], None, p, out, None, None, 0, 0.0, 0.0, 0, 1),
        "a strided": lambda: q.gemm(np.zeros((8, 32), np.uint8)[:, ::2], None, p, out, None, None, 0, 0.0, 0.0, 0, 1),
        "a short": lambda: q.gemm(a[:, :15].copy(), None, p, out, None, None, 0, 0.0, 0.0, 0, 1),
        "out small": lambda: q.gemm(a, None, p, out[:7], None, None, 0, 0.0, 0.0, 0, 1),
        "out readonly": lambda: q.gemm(a, None, p, np.frombuffer(bytes(128), np.int32).reshape(8, 4), None, None,
                                       0, 0.0, 0.0, 0, 1),
        "out int64": lambda: q.gemm(a, None, p, out.astype(np.int64), None, None, 0, 0.0, 0.0, 0, 1),
        "overlap": lambda: q.gemm(out.view(np.uint8).reshape(8, 16), None, p, out, None, None, 0, 0.0, 0.0, 0, 1),
        "a_zero dtype": lambda: q.gemm(a, np.zeros(1, np.int8), p, out, None, None, 0, 0.0, 0.0, 0, 1),
        "a_zero count": lambda: q.gemm(a, np.zeros(3, np.uint8), p, out, None, None, 0, 0.0, 0.0, 0, 1),
        "bias count": lambda: q.gemm(a, None, p, out, np.zeros(3, np.int32), None, 0, 0.0, 0.0, 0, 1),
        "scale missing": lambda: q.gemm(a, None, p, out.astype(np.float32), None, None, 0, 0.0, 0.0, 0, 1),
        "packed wrong": lambda: q.gemm(a, None, w, out, None, None, 0, 0.0, 0.0, 0, 1),
        "threads": lambda: q.gemm(a, None, p, out, None, None, 0, 0.0, 0.0, 0, -1),
        "threads str": lambda: q.gemm(a, None, p, out, None, None, 0, 0.0, 0.0, 0, "2"),
        "nargs": lambda: q.gemm(a, None, p),
        "y_zero range": lambda: q.gemm(a, None, p, out.astype(np.uint8), None, np.ones(4, np.float32), 300, 0.0,
                                       1.0, 0, 1),
        "pack K huge": lambda: q.pack_b(w, 1 << 20, 4, None, 0),
        "pack size": lambda: q.pack_b(w, 16, 5, None, 0),
        "pack zero count": lambda: q.pack_b(w, 16, 4, np.zeros(3, np.int8), 0),
        "pack None": lambda: q.pack_b(None, 16, 4, None, 0),
        "dyn x int": lambda: q.gemm_dynamic(a, 1, p, out.astype(np.float32), None, np.ones(4, np.float32), 0.0, 1.0,
                                            1),
        "dyn out int": lambda: q.gemm_dynamic(a.astype(np.float32), 1, p, out, None, np.ones(4, np.float32), 0.0,
                                              1.0, 1),
        "rounding": lambda: q.gemm(a, None, p, out.astype(np.uint8), None, np.ones(4, np.float32), 0, 0.0, 1.0, 2,
                                   1),
        "conv geometry": lambda: q.conv(a, None, p, (1, 2, 3), out, None, None, 0, 0.0, 0.0, 0, 1),
        "conv K": lambda: q.conv(a, None, p, (1, 8, 2, 8, 8, 2, 1, 1, 1, 1, 1, 1, 0, 0), out, None, None, 0, 0.0,
                                 0.0, 0, 1),
        "dw w dtype": lambda: q.dwconv(a, None, np.zeros(16, np.int8), (1, 8, 2, 1, 8, 2, 1, 1, 1, 1, 1, 1, 0, 0),
                                       out, None, None, 0, 0.0, 0.0, 0, 1),
        "table1 x float": lambda: q.table1(a.astype(np.float32), t1, a.copy(), 1),
        "table1 short table": lambda: q.table1(a, t1[:255].copy(), a.copy(), 1),
        "table1 out size": lambda: q.table1(a, t1, a[:7].copy(), 1),
        "table1 out dtype": lambda: q.table1(a, t1, a.astype(np.int8), 1),
        "table1 out table": lambda: q.table1(a[:, :4].copy(), t1, t1[:32], 1),
        "table1 nargs": lambda: q.table1(a, t1, a.copy()),
        "table1 channels": lambda: q.table1(a, np.zeros((3, 256), np.uint8), a.copy(), 1),
        "table2 b period": lambda: q.table2(a, np.zeros(3, np.uint8), t2, a.copy(), 1),
        "table2 b empty": lambda: q.table2(a, np.zeros(0, np.uint8), t2, a.copy(), 1),
        "table2 out b": lambda: q.table2(a, b8, t2, b8, 1),
        "table2 table size": lambda: q.table2(a, b8, t1, a.copy(), 1),
        "table2 strided": lambda: q.table2(np.zeros((8, 32), np.uint8)[:, ::2], b8, t2, a.copy(), 1),
        "table2 threads": lambda: q.table2(a, b8, t2, a.copy(), -1),
        "dw negative": lambda: q.dwconv(a, None, np.zeros(1, np.int16), (1, 8, 2, 1, 8, 2, 1, 1, 1, 1, 1, 1, -1, 0),
                                        out, None, None, 0, 0.0, 0.0, 0, 1),
    }
    for name, call in bad.items():
        try:
            call()
        except (TypeError, ValueError, OverflowError, RuntimeError) as exc:
            assert any(k in str(exc) for k in ("gemm", "pack_b", "conv", "table")), (name, exc)
            print("ok", name, type(exc).__name__, exc)
        else:
            print("NO ERROR", name)
""")


def test_argument_fuzz_gives_typed_errors_never_a_crash():
    run = subprocess.run([sys.executable, "-c", FUZZ], check=False, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "NO ERROR" not in run.stdout, run.stdout
    assert run.stdout.count("\nok ") + run.stdout.startswith("ok ") == 42, run.stdout


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("params", [(0.021, 3, 0.017, 128), (0.5, 128, 0.001, 255), (1e-3, 0, 7.0, 9),
                                    (0.0371, 200, 0.0371, 200), (0.25, 0, 0.5, 0)])
def test_kernels_biased_equals_the_reference_chain(dtype, params):
    """``biased`` (DequantizeLinear -> + bias[c] -> QuantizeLinear computed) equals the host kernels' chain on
    every code of every channel, with saturating biases, rounding ties (scales 0.25 / 0.5 and biases on
    half steps), channel counts below, at and past the vector width (tails), two parts and in place."""
    from nnhal.hostkernels.op_dequantize_linear import DequantizeLinearKernel
    from nnhal.hostkernels.op_quantize_linear import QuantizeLinearKernel

    sx, zx, sy, zy = params
    if dtype == np.int8:
        zx, zy = zx - 128, zy - 128
    rng = np.random.default_rng(int(sy * 1000) + 7)

    def want(x, bias):
        node = _Attrs()
        real = DequantizeLinearKernel().compute(node, x, np.float32(sx), dtype(zx))
        return QuantizeLinearKernel().compute(node, real + bias, np.float32(sy), dtype(zy))

    codes = np.arange(256, dtype=np.uint8).view(dtype)
    for channels, threads in ((1, 1), (3, 1), (8, 1), (13, 2), (384, 1), (1000, 2)):
        bias = (rng.standard_normal(channels) * 300 * sy).astype(np.float32)
        bias[::3] = np.float32(sy) * (rng.integers(-300, 300, bias[::3].size) + 0.5)   # ties after the sum
        x = np.ascontiguousarray(np.repeat(codes[:, None], channels, 1))
        out = np.empty_like(x)
        _q().biased(x, bias, out, sx, zx, sy, zy, 1)
        np.testing.assert_array_equal(out, want(x, bias))
        for shape in ((600, channels), (2, 3, channels)):
            x = _rand(rng, shape, dtype, extreme=True)
            out = np.empty(shape, dtype)
            _q().biased(x, bias, out, sx, zx, sy, zy, threads)
            expected = want(x, bias)
            np.testing.assert_array_equal(out, expected)
            _q().biased(x, bias, x, sx, zx, sy, zy, threads)        # in place
            np.testing.assert_array_equal(x, expected)


def test_kernels_biased_refuses_bad_arguments():
    x = np.zeros(6, np.uint8)
    with pytest.raises(ValueError, match="biased: argument 'b' has 4 elements"):
        _q().biased(x, np.zeros(4, np.float32), np.empty(6, np.uint8), 1.0, 0, 1.0, 0, 1)
    with pytest.raises(TypeError, match="biased: argument 'bias'"):
        _q().biased(x, np.zeros(6, np.float64), np.empty(6, np.uint8), 1.0, 0, 1.0, 0, 1)
    with pytest.raises(TypeError, match="biased: argument 'out'"):
        _q().biased(x, np.zeros(6, np.float32), np.empty(6, np.int8), 1.0, 0, 1.0, 0, 1)


class _Attrs:
    """The node handed to the host Q/DQ kernels: their defaults."""

    attrs = {"axis": 1, "saturate": 1, "block_size": 0}
    op_type = "QuantizeLinear"
