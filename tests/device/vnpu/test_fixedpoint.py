"""Fixed-point requantization equals a careful pure-integer reference bit for bit."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.fixedpoint import quantize_multiplier, requantize


def reference_requantize(acc: int, m0: int, shift: int) -> int:
    """gemmlowp in Python integers: saturating rounding doubling high mul, rounding divide by 2^n."""
    left, right = max(shift, 0), max(-shift, 0)
    x = max(min(acc * (1 << left), 2 ** 31 - 1), -2 ** 31)
    ab = x * m0
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    t = ab + nudge
    high = t // (1 << 31) if t >= 0 else -((-t) // (1 << 31))
    mask = (1 << right) - 1
    remainder = high & mask
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if remainder > threshold else 0)


def test_requantize_is_bit_exact():
    rng = np.random.default_rng(0)
    acc = rng.integers(-2 ** 24, 2 ** 24, 4000)
    reals = np.exp(rng.uniform(np.log(1e-6), np.log(4.0), 4000))
    m0, shift = quantize_multiplier(reals)
    got = requantize(acc, m0, shift)
    want = [reference_requantize(int(a), int(m), int(s)) for a, m, s in zip(acc, m0, shift)]
    np.testing.assert_array_equal(got, want)
    # and it is round(acc * real) up to the multiplier's 31-bit precision
    assert np.max(np.abs(got - np.rint(acc * reals))) <= 1


def test_quantize_multiplier_range():
    m0, shift = quantize_multiplier(np.array([1e-5, 0.3, 0.5, 0.9999999999, 1.0, 3.0]))
    assert np.all((m0 >= 2 ** 30) & (m0 < 2 ** 31))
    np.testing.assert_allclose(m0 * 2.0 ** (shift - 31), [1e-5, 0.3, 0.5, 0.9999999999, 1.0, 3.0], rtol=1e-9)
