"""Fixed-point requantization, as integer NPUs (and TFLite / gemmlowp) do it.

A real multiplier M > 0 is stored as a Q31 integer m0 in [2^30, 2^31) and a
power-of-two exponent: M = m0 * 2^(shift - 31). Requantizing an int32
accumulator is then a saturating rounding doubling high multiply by m0
followed by a rounding right shift: no floating point at run time.
"""
from __future__ import annotations

import numpy as np

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def quantize_multiplier(real: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """(m0, shift) int64 arrays with real = m0 * 2^(shift - 31); real must be > 0."""
    real = np.asarray(real, np.float64)
    if np.any(real <= 0):
        raise ValueError("requantization multipliers must be positive")
    q, e = np.frexp(real)                       # real = q * 2^e, q in [0.5, 1)
    m0 = np.rint(q * (1 << 31)).astype(np.int64)
    carry = m0 == (1 << 31)
    m0 = np.where(carry, m0 // 2, m0)
    e = np.where(carry, e + 1, e).astype(np.int64)
    return m0, e


def _trunc_shift(x: np.ndarray, bits: int) -> np.ndarray:
    """x / 2^bits rounded toward zero (C integer division)."""
    return np.where(x >= 0, x >> bits, -((-x) >> bits))


def requantize(acc: np.ndarray, m0: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """round(acc * m0 * 2^(shift - 31)) in the exact integer steps of gemmlowp (int64 in, int64 out)."""
    acc = np.asarray(acc, np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    x = np.clip(acc << left, INT32_MIN, INT32_MAX)
    # saturating rounding doubling high multiply (m0 > 0, so no INT32_MIN * INT32_MIN case)
    ab = x * m0
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = _trunc_shift(ab + nudge, 31)
    # rounding divide by 2^right, ties away from zero
    mask = (np.int64(1) << right) - 1
    remainder = high & mask
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + (remainder > threshold)
