"""The tolerance policy: NNAPI CTS numbers, and the comparisons that can fail."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.conformance.tolerance import (
    compare,
    gamma,
    matmul_bound,
    policy,
    reduction_bound,
    rounded_within,
    steps_off,
    within_bound,
)


def test_numbers_follow_nnapi():
    assert policy("fp32") .atol == 1e-5 and policy("fp32").rtol == 5 * 2.0 ** -23
    assert policy("fp16").atol == policy("fp16").rtol == 5 * 2.0 ** -10
    assert policy("uint8").int_off_by == 1 and policy("fp32").int_off_by == 0
    # a case's own looser tolerance wins
    assert policy("fp32", case_atol=1e-4, case_rtol=1e-3).rtol == 1e-3


def test_compare_catches_what_it_must():
    a = np.array([1.0, 2.0, np.nan], np.float32)
    assert compare(a, a.copy(), policy("fp32")) is None
    assert "dtype" in compare(a.astype(np.float64), a, policy("fp32"))
    assert "shape" in compare(a[:2], a, policy("fp32"))
    assert "NaN" in compare(np.array([1, 2, 3], np.float32), a, policy("fp32"))
    assert "values off" in compare(a + np.float32(1e-3), a, policy("fp32"))
    q = np.array([10, 20], np.uint8)
    assert compare(q + 1, q, policy("uint8")) is None
    assert "off by more than 1" in compare(q + 2, q, policy("uint8"))
    assert "off by more than 0" in compare(q + 1, q, policy("fp32"))


def test_unknown_precision():
    with pytest.raises(ValueError, match="unknown precision"):
        policy("fp8")


def test_kit_policy_catches_a_1_001_error_on_every_op_and_allows_only_documented_slack():
    from nnhal.conformance.tolerance import (
        ACCUMULATION_RTOL,
        CASE_DATA_RTOL,
        TRANSCENDENTAL_RTOL,
        kit_policy,
        quantized_atol,
    )

    x = np.linspace(0.5, 2.0, 16, dtype=np.float32)
    for ops in (["Relu"], ["Add", "Mul"], ["Conv"], ["ReduceSum"], ["Exp"]):
        assert "values off" in compare(x * np.float32(1.001), x, kit_policy("fp32", ops)), ops
    assert kit_policy("fp32", ["Relu", "Add"]) == policy("fp32")           # no case tolerance, no slack
    assert kit_policy("fp32", ["Relu", "Conv"]).rtol == ACCUMULATION_RTOL
    assert kit_policy("fp32", ["Tanh"]).rtol == TRANSCENDENTAL_RTOL
    assert kit_policy("fp32", ["AveragePool"], "test_averagepool_2d_ceil_last_window_starts_on_pad").rtol == \
        CASE_DATA_RTOL
    assert kit_policy("fp16", ["Conv"]) == policy("fp16")
    assert quantized_atol([np.array([-1.0, 3.0]), np.array([1, 2], np.int64)]) == 2 * 4.0 / 255

def _sum_in_order(terms: np.ndarray, order: str) -> np.float32:
    """A float32 sum of ``terms`` in one order: left to right, right to left, pairwise, or numpy's own."""
    if order == "forward":
        acc = np.float32(0)
        for t in terms:
            acc = np.float32(acc + t)
        return acc
    if order == "backward":
        return _sum_in_order(terms[::-1], "forward")
    if order == "pairwise":
        while terms.size > 1:
            terms = np.concatenate([terms[0::2][:terms.size // 2] + terms[1::2], terms[terms.size // 2 * 2:]])
        return terms[0]
    return terms.sum(dtype=np.float32)


def test_reduction_bound_covers_every_order_and_not_a_dropped_term():
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(4096) * np.exp(rng.uniform(-8, 8, 4096))).astype(np.float32)
    b = rng.standard_normal(4096).astype(np.float32)
    terms = a * b                       # each product rounded once, as a GEMM without FMA does
    bound = reduction_bound(np.abs(a.astype(np.float64) * b).sum(), a.size)
    sums = [_sum_in_order(terms, order) for order in ("forward", "backward", "pairwise", "numpy")]
    exact = float(np.sum(a.astype(np.float64) * b))
    for s in sums:
        assert within_bound(np.float32(s), np.float64(exact), bound) is None
    dropped = float(exact - a[int(np.argmax(np.abs(terms)))] * b[int(np.argmax(np.abs(terms)))])
    assert within_bound(np.float32(dropped), np.float64(exact), bound) is not None


def test_matmul_bound_of_a_chain_adds_the_inner_dimensions():
    a, b, c = np.ones((2, 3)), np.ones((3, 5)), np.ones((5, 4))
    np.testing.assert_allclose(matmul_bound(a, b, c), np.full((2, 4), 2 * gamma(3 + 5 + 1) * 15))
    assert gamma(1, np.float16) == pytest.approx(2.0 ** -11 / (1 - 2.0 ** -11))
    with pytest.raises(ValueError, match="unbounded"):
        gamma(1 << 24)


def test_within_bound_and_steps_off_say_why():
    assert within_bound(np.array([1.0, 2.0]), np.array([1.0, 2.5]), 0.1).startswith("1 of 2 values off; worst at (1,)")
    assert within_bound(np.array([np.nan]), np.array([1.0]), 1.0) is not None
    assert steps_off(np.array([3, 4], np.uint8), np.array([4, 4], np.uint8)) is None
    assert steps_off(np.array([2, 4], np.uint8), np.array([4, 4], np.uint8)) == \
        "1 of 2 values off by more than 1 step(s), up to 2"


def test_rounded_within_accepts_only_roundings_inside_the_bound():
    wide = np.array([1.0 + 2.0 ** -11, 1.0 + 2.0 ** -12])        # a float16 tie, and a value far from one
    assert rounded_within(np.array([1.0, 1.0]), wide, 1e-6, np.float16) is None
    assert rounded_within(np.array([1.0 + 2.0 ** -10, 1.0]), wide, 1e-6, np.float16) is None   # either side
    assert rounded_within(np.array([1.0, 1.0 + 2.0 ** -10]), wide, 1e-6, np.float16) is not None
    assert rounded_within(np.array([1.0 + 2.0 ** -12, 1.0]), wide, 1.0, np.float16) is not None  # not a float16
