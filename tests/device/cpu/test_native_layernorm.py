"""The native LayerNormalization (kernels.c nn_layernorm_f32) against a float64 reference, whole and split
over the native pool, and the cpu kernel that uses it against onnxruntime's semantics."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.device.cpu import native

pytestmark = pytest.mark.skipif(not native.available(), reason="the native kernels are not built here "
                                                               "(no C compiler at install, or NNHAL_NATIVE=0)")


def _reference(x, scale, bias, eps):
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + eps)
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    return y


@pytest.mark.parametrize("shape", [(128, 384), (3136, 96), (5, 7), (2, 3, 17), (1, 1), (4, 16)])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_layernorm_matches_float64(shape, affine, parts):
    native.pool_set_threads(2)
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    scale = rng.standard_normal(shape[-1]).astype(np.float32) if affine else None
    bias = rng.standard_normal(shape[-1]).astype(np.float32) if affine else None
    y = np.full_like(x, np.nan)
    native.layernorm(x, y, scale, bias, 1e-5, parts)
    want = _reference(x, scale, bias, 1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
    native.layernorm(x, x, scale, bias, 1e-5, parts)          # in place: the same kernel, bit for bit
    np.testing.assert_array_equal(x, y)


def test_constant_rows_and_nan():
    x = np.array([[2.0, 2.0, 2.0, 2.0], [1.0, np.nan, 0.0, 1.0]], np.float32)
    y = np.empty_like(x)
    native.layernorm(x, y, None, None, 1e-5, 1)
    np.testing.assert_array_equal(y[0], 0.0)          # no division by zero: eps
    assert np.isnan(y[1]).all()                      # a NaN poisons its row, as in numpy
