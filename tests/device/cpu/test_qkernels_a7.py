"""gemm_dynamic on weights packed for 7-bit activations (pack_b's a7): rows quantized to [0, 127], bit-exact.

Every instruction-set path runs (``test_isa_path`` reruns the kernel tests with NNHAL_QGEMM_ISA forcing it):
avx2 multiplies by vpmaddubsw (u7 x s8 pair sums fit int16), the others by their usual products; the int32
sums are exact and the epilogue's float operations fixed, so every path equals the numpy reference bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.device.cpu import qnative
from tests.device.cpu.isa_rerun import rerun_under_isa

ISAS = ("avx512vnni", "avxvnni", "avx2", "portable")
SHAPES = [(1, 1, 1), (3, 5, 7), (7, 17, 33), (9, 64, 32), (17, 67, 70), (33, 130, 31), (2, 3, 100),
          (13, 4099, 37)]

pytestmark = pytest.mark.skipif(not qnative.status().available,
                                reason=f"integer kernels not loaded: {qnative.status().reason}")


def _q():
    return qnative.kernels()


def a7_reference(x: np.ndarray, w: np.ndarray, scale_w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """7-bit asymmetric per-row quantization of x (float32 as numpy runs it), int64 sums, then the float
    epilogue: sum * row scale * column scale + bias."""
    lo = np.minimum(x.min(axis=1, keepdims=True), 0)
    hi = np.maximum(x.max(axis=1, keepdims=True), 0)
    sx = np.where(hi > lo, (hi - lo) / np.float32(127), np.float32(1)).astype(np.float32)
    zero = np.rint(-lo / sx)
    xq = np.clip(np.rint(x / sx) + zero, 0, 127).astype(np.int64)
    acc = (xq - zero.astype(np.int64)) @ w.T.astype(np.int64)
    assert np.abs(acc).max(initial=0) < 2 ** 31
    return acc.astype(np.int32).astype(np.float32) * sx * scale_w + bias


def _case(seed, m, k, n):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10, (m, 1))).astype(np.float32)
    if m > 2:
        x[1] = 0.0                       # a zero row: scale 1, every code 0
        x[2] = np.abs(x[2])              # no negative value: zero point 0, codes up to 127
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    w[0] = 127
    w[n - 1] = -128                      # full-range weights: vpmaddwd's path without a7
    scale_w = rng.uniform(1e-3, 1e-2, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    return x, w, scale_w, bias


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("signed", [1, 0])
def test_kernels_a7_gemm_dynamic_equals_the_integer_reference(m, k, n, signed):
    x, w, scale_w, bias = _case(7 * m + k, m, k, n)
    packed = _q().pack_b(w, k, n, None, 1, 1)
    assert packed.a7 and packed.narrow == (_q().isa() == "avx2"), packed
    out = np.empty((m, n), np.float32)
    _q().gemm_dynamic(x, signed, packed, out, bias, scale_w, -np.inf, np.inf, 2)
    np.testing.assert_array_equal(out, a7_reference(x, w, scale_w, bias))


@pytest.mark.parametrize("m,k,n", [(13, 4099, 37), (6, 1030, 48), (7, 3, 16)])
def test_kernels_a7_extreme_codes_and_weights(m, k, n):
    """Rows whose codes are only 0 and 127 against weights only -128 and 127: the largest pair sums
    vpmaddubsw forms (127 * -128 * 2 = -32512), over long K."""
    rng = np.random.default_rng(k)
    x = rng.choice(np.array([-1.0, 1.0], np.float32), size=(m, k))
    x[:, 0], x[:, -1] = -1.0, 1.0        # both ends in every row: codes 0 and 127 (zero point 64)
    w = rng.choice(np.array([-128, 127], np.int8), size=(n, k))
    w[0] = -128
    scale_w = np.full(n, 0.5, np.float32)
    bias = np.zeros(n, np.float32)
    out = np.empty((m, n), np.float32)
    _q().gemm_dynamic(x, 0, _q().pack_b(w, k, n, None, 1, 1), out, bias, scale_w, -np.inf, np.inf, 1)
    np.testing.assert_array_equal(out, a7_reference(x, w, scale_w, bias))


def test_kernels_a7_clamps_like_the_reference():
    x, w, scale_w, bias = _case(11, 17, 67, 70)
    out = np.empty((17, 70), np.float32)
    _q().gemm_dynamic(x, 1, _q().pack_b(np.ascontiguousarray(w.T), 67, 70, None, 0, 1), out, bias, scale_w,
                      -0.5, 0.25, 2)
    np.testing.assert_array_equal(out, np.clip(a7_reference(x, w, scale_w, bias), np.float32(-0.5),
                                               np.float32(0.25)))


def test_kernels_a7_weights_only_serve_gemm_dynamic():
    """gemm and conv take 8-bit activations, which vpmaddubsw could saturate on: a7 weights are refused."""
    w = np.full((4, 4), -128, np.int8)
    packed = _q().pack_b(w, 4, 4, None, 0, 1)
    with pytest.raises(ValueError, match="gemm: .*a7"):
        _q().gemm(np.full((2, 4), 255, np.uint8), None, packed, np.empty((2, 4), np.int32), None, None, 0, 0.0, 0.0,
                  0, 1)
    with pytest.raises(ValueError, match="conv: .*a7"):
        _q().conv(np.zeros((1, 2, 2, 4), np.uint8), None, packed, (1, 2, 2, 4, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0),
                  np.empty((1, 2, 2, 4), np.int32), None, None, 0, 0.0, 0.0, 0, 1)
    with pytest.raises(ValueError, match="a7"):
        _q().pack_b(w, 4, 4, None, 0, 2)
    assert not _q().pack_b(w, 4, 4, None, 0).a7


@pytest.mark.parametrize("isa", ISAS)
def test_isa_path(isa):
    """This file's kernel tests again with NNHAL_QGEMM_ISA=isa, in a fresh process."""
    rerun_under_isa(__file__, isa, _q().available(), "kernels")
