"""Full-range 8-bit weights split for avx2's vpmaddubsw (qkernels.c pack_b's ``split``): W = W1 + W2, every K
pair of W1 within |w1_2i| + |w1_2i+1| <= 128 run by the narrow kernel, the sparse W2 added into the int32 sums.

The sums must be the exact ones, so every comparison is bit-equality against the int64 numpy reference (and
against onnx.reference for QLinearMatMul / QLinearConv). ``test_isa_path`` reruns these tests with
NNHAL_QGEMM_ISA forcing each path this CPU has (only avx2 splits; the others ignore the argument and must give
the same sums).
"""
from __future__ import annotations

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


def _avx2() -> bool:
    return _q().isa() == "avx2"


def _int_ref(a, za, b, zb):
    """(a - za) @ (b - zb) in int64 (za per row, zb per column), as int32 (the sums fit)."""
    aa = a.astype(np.int64) - (0 if za is None else np.broadcast_to(za.astype(np.int64), a.shape[:1])[:, None])
    bb = b.astype(np.int64) - (0 if zb is None else np.broadcast_to(zb.astype(np.int64), b.shape[1:])[None, :])
    out = aa @ bb
    assert np.abs(out).max(initial=0) < 2 ** 31
    return out.astype(np.int32)


def _offset(dtype) -> int:
    return 0 if dtype == np.int8 else 128


def _minilm_like(rng, shape, dtype, sigma=40.0):
    """Full-range weights shaped like a per-channel quantized transformer's: mostly moderate, a few pairs
    whose magnitudes sum past 128 (about 3% at sigma 40), the ends -128 / 127 included."""
    w = np.clip(np.rint(rng.standard_normal(shape) * sigma), -128, 127)
    w.flat[rng.integers(0, w.size, 3)] = rng.choice([-128, 127], 3)
    return (w + _offset(dtype)).astype(dtype)


def _excess_pairs(b, dtype) -> int:
    """The K pairs (2i, 2i + 1) of b's columns whose |bs| sum exceeds 128: W2's nonzeros."""
    bs = b.astype(np.int64) - _offset(dtype)
    if bs.shape[0] % 2:
        bs = np.vstack([bs, np.zeros((1, bs.shape[1]), np.int64)])
    pair = np.abs(bs[0::2]) + np.abs(bs[1::2])
    return int((pair > 128).sum())


def _gemm(a, za, packed, n, threads):
    out = np.empty((a.shape[0], n), np.int32)
    _q().gemm(a, za, packed, out, None, None, 0, 0.0, 0.0, 0, threads)
    return out


SHAPES = [(1, 1, 1), (3, 5, 7), (7, 3, 17), (5, 33, 15), (31, 67, 33), (33, 130, 31), (40, 259, 65),
          (64, 384, 48), (6, 1030, 16), (300, 384, 40), (97, 1537, 19)]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.int8), (np.int8, np.uint8)])
def test_split_gemm_is_the_exact_sum(m, k, n, adt, bdt):
    """Forced split, the automatic choice and the wide path, both layouts (trans), per-column zero points,
    1 and 2 threads: all equal the int64 reference. Odd M / N / K, K not a multiple of 4 / 8 / 32, rows past
    one 32-row block and past one chunk of packed rows (300 x 384, 97 x 1537)."""
    rng = np.random.default_rng(m * 7919 + k * 31 + n)
    a = rng.integers(np.iinfo(adt).min, int(np.iinfo(adt).max) + 1, (m, k), dtype=adt)
    b = _minilm_like(rng, (k, n), bdt)
    za = rng.integers(np.iinfo(adt).min, int(np.iinfo(adt).max) + 1, m, dtype=adt)
    zb = rng.integers(np.iinfo(bdt).min, int(np.iinfo(bdt).max) + 1, n, dtype=bdt)
    want = _int_ref(a, za, b, zb)
    excess = _excess_pairs(b, bdt)
    for trans in (0, 1):
        src = np.ascontiguousarray(b.T) if trans else b
        for split in (1, -1, 0):
            packed = _q().pack_b(src, k, n, zb, trans, 0, split)
            if _avx2() and split == 1:
                assert packed.split and packed.w2_nnz == excess, (packed, excess)
            if split == 0 or not _avx2():
                assert not packed.split
            for threads in (1, 2):
                np.testing.assert_array_equal(_gemm(a, za, packed, n, threads), want)


@pytest.mark.parametrize("m,k,n", [(13, 4099, 37), (7, 37, 19), (40, 64, 33)])
@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8),
                                     (np.int8, np.uint8)])
def test_split_extreme_values_dense_w2(m, k, n, adt, bdt):
    """All weights at -128 / 127 (every K pair too wide: W2 as dense as it gets, half the weights), activations
    at their ends, zero points at the ends of their range: the largest products and pair sums there are."""
    rng = np.random.default_rng(k + m)
    info_a, info_b = np.iinfo(adt), np.iinfo(bdt)
    a = rng.choice(np.array([info_a.min, info_a.max], adt), (m, k))
    b = rng.choice(np.array([info_b.min, info_b.max], bdt), (k, n))
    for za, zb in ((np.array([info_a.min], adt), np.array([info_b.max], bdt)),
                   (np.array([info_a.max], adt), np.array([info_b.min], bdt))):
        want = _int_ref(a, np.full(m, za[0], adt), b, np.full(n, zb[0], bdt))
        packed = _q().pack_b(b, k, n, zb, 0, 0, 1)
        if _avx2():
            assert packed.split and packed.w2_nnz == _excess_pairs(b, bdt) >= k * n // 2 - n, packed
        auto = _q().pack_b(b, k, n, zb, 0)
        assert not auto.split, "a dense W2 keeps the wide path"
        for threads in (1, 2):
            np.testing.assert_array_equal(_gemm(a, za, packed, n, threads), want)
            np.testing.assert_array_equal(_gemm(a, za, auto, n, threads), want)


def test_split_empty_and_single_entry_w2():
    """Forced split on weights that fit 7 bits: W2 empty; one weight of 127 beside a 64: W2 has one entry (63,
    at that K index), which the automatic choice also splits (density 1 / (K N))."""
    rng = np.random.default_rng(11)
    m, k, n = 37, 71, 45
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    b = rng.choice(np.array([-64, 64], np.int8), (k, n))
    empty = _q().pack_b(b, k, n, None, 0, 0, 1)
    if _avx2():
        assert empty.split and empty.w2_nnz == 0 and not empty.narrow
    np.testing.assert_array_equal(_gemm(a, None, empty, n, 2), _int_ref(a, None, b, None))
    for kk, col in ((0, 0), (k - 2, n - 1), (33, 17)):       # k - 2: the last whole pair (K is odd)
        one = b.copy()
        one[kk, col] = 127
        one[kk ^ 1, col] = 64
        auto = _q().pack_b(one, k, n, None, 0)
        if _avx2():
            assert auto.split and auto.w2_nnz == _excess_pairs(one, np.int8) == 1, auto
        for threads in (1, 2):
            np.testing.assert_array_equal(_gemm(a, None, auto, n, threads), _int_ref(a, None, one, None))


def test_split_choice_follows_w2_density():
    """The automatic choice splits sparse excess (a few too-wide pairs) and widens dense excess (uniform
    random weights: about half the pairs too wide); weights that fit 7 bits stay narrow."""
    if not _avx2():
        pytest.skip(f"only avx2 splits (this run: {_q().isa()})")
    rng = np.random.default_rng(3)
    k, n = 384, 64
    sparse = _minilm_like(rng, (k, n), np.int8, sigma=30.0)
    dense = rng.integers(-128, 128, (k, n), dtype=np.int8)
    seven = rng.integers(-64, 65, (k, n), dtype=np.int8)
    assert _excess_pairs(sparse, np.int8) <= 0.03 * k * n < _excess_pairs(dense, np.int8)
    assert _q().pack_b(sparse, k, n, None, 0).split
    assert not _q().pack_b(dense, k, n, None, 0).split
    narrow = _q().pack_b(seven, k, n, None, 0)
    assert narrow.narrow and not narrow.split
    assert not _q().pack_b(sparse, k, n, None, 0, 1).split, "weights for 7-bit activations are never split"


@pytest.mark.parametrize("m,k,n", [(5, 33, 15), (40, 259, 65), (128, 384, 48)])
@pytest.mark.parametrize("adt,ydt", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
def test_split_qlinear_matmul_equals_onnx_reference(m, k, n, adt, ydt):
    rng = np.random.default_rng(3 * m + k + n)
    a = rng.integers(np.iinfo(adt).min, int(np.iinfo(adt).max) + 1, (m, k), dtype=adt)
    b = _minilm_like(rng, (k, n), np.int8)
    a_scale = np.float32(rng.uniform(0.001, 0.05))
    b_scale = rng.uniform(0.001, 0.05, n).astype(np.float32)
    a_zero = np.array(rng.integers(np.iinfo(adt).min, int(np.iinfo(adt).max) + 1), adt)
    y_scale = np.float32(rng.uniform(0.05, 2.0) * a_scale * b_scale.mean() * np.sqrt(k) * 128)
    y_zero = np.array(rng.integers(np.iinfo(ydt).min, int(np.iinfo(ydt).max) + 1), ydt)
    want = QLinearMatMul._run(None, a, np.array(a_scale), a_zero, b, b_scale, np.zeros(n, np.int8),
                              np.array(y_scale), y_zero)[0]
    factor = (np.float32(a_scale) * b_scale / np.float32(y_scale)).astype(np.float32)
    packed = _q().pack_b(b, k, n, None, 0, 0, 1)
    out = np.empty((m, n), ydt)
    _q().gemm(a, a_zero.reshape(1), packed, out, None, factor, int(y_zero), -1e9, 1e9, 0, 2)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
@pytest.mark.parametrize("case", [(1, 64, 6, 7, 33, 1, 1, 1, 0), (2, 13, 7, 5, 19, 3, 3, 2, 1),
                                  (1, 40, 9, 9, 17, 3, 3, 1, 1)])
def test_split_qlinear_conv_equals_onnx_reference(xdt, case):
    """1x1 and implicit-GEMM (3x3, strided, padded) convolutions on split weights (K = C, 9 C: 64, 117, 360)."""
    n, c, h, w, m, kh, kw, stride, pad = case
    rng = np.random.default_rng(sum(case) + 5)
    x = rng.integers(np.iinfo(xdt).min, int(np.iinfo(xdt).max) + 1, (n, c, h, w), dtype=xdt)
    wt = _minilm_like(rng, (m, c * kh * kw), np.int8).reshape(m, c, kh, kw)
    x_scale, y_scale = np.array(0.02, np.float32), np.array(0.3, np.float32)
    w_scale = rng.uniform(0.005, 0.02, m).astype(np.float32)
    x_zero = np.array(rng.integers(np.iinfo(xdt).min, int(np.iinfo(xdt).max) + 1), xdt)
    y_zero = np.array(rng.integers(np.iinfo(xdt).min, int(np.iinfo(xdt).max) + 1), xdt)
    bias = rng.integers(-5000, 5000, m, dtype=np.int32)
    want = QLinearConv._run(None, x, x_scale, x_zero, wt, w_scale, np.array(0, np.int8), y_scale, y_zero, bias,
                            auto_pad="NOTSET", dilations=[1, 1], group=1, kernel_shape=[kh, kw], pads=[pad] * 4,
                            strides=[stride, stride])[0]
    oh, ow = want.shape[2:]
    factor = (x_scale * w_scale / y_scale).astype(np.float32)
    packed = _q().pack_b(np.ascontiguousarray(wt.transpose(0, 2, 3, 1)), wt[0].size, m, None, 1, 0, 1)
    if _avx2():
        assert packed.split and packed.w2_nnz > 0, packed
    out = np.empty((n, oh, ow, m), xdt)
    for threads in (1, 2):
        _q().conv(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), x_zero.reshape(1), packed,
                  (n, h, w, c, oh, ow, kh, kw, stride, stride, 1, 1, pad, pad), out, bias, factor, int(y_zero),
                  -1e9, 1e9, 0, threads)
        np.testing.assert_array_equal(out.transpose(0, 3, 1, 2), want)


@pytest.mark.parametrize("signed", [True, False])
def test_split_gemm_dynamic_equals_wide(signed):
    """DynamicQuantizeGemm's kernel (float rows quantized while packed) on split weights: the same floats as
    on the wide packing, which test_qkernels checks against its reference (same int32 sums, same epilogue)."""
    rng = np.random.default_rng(17 + signed)
    m, k, n = 45, 384, 70
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10, (m, 1))).astype(np.float32)
    w = _minilm_like(rng, (n, k), np.int8)
    scale_w = rng.uniform(1e-3, 1e-2, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    outs = []
    for split in (1, 0):
        packed = _q().pack_b(w, k, n, None, 1, 0, split)
        assert packed.split == (split == 1 and _avx2())
        out = np.empty((m, n), np.float32)
        _q().gemm_dynamic(x, int(signed), packed, out, bias, scale_w, -np.inf, np.inf, 2)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_split_argument_is_checked():
    w = np.zeros((4, 4), np.int8)
    with pytest.raises(ValueError, match="pack_b"):
        _q().pack_b(w, 4, 4, None, 0, 0, 2)
    with pytest.raises(TypeError, match="pack_b"):
        _q().pack_b(w, 4, 4, None, 0, 0, 1, 0)


@pytest.mark.parametrize("isa", ISAS)
def test_isa_path(isa):
    """This file's split tests again with NNHAL_QGEMM_ISA=isa, in a fresh process."""
    rerun_under_isa(__file__, isa, _q().available(), "split")
