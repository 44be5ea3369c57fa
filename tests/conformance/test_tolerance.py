"""The tolerance policy: NNAPI CTS numbers, and the comparisons that can fail."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.conformance.tolerance import compare, policy


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
