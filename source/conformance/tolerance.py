"""The tolerance policy, per precision (Android NNAPI CTS).

fp32: per-op atol 1e-5 and rtol 5·2^-23, loosened to a test case's own
tolerance where that is looser; fp16: atol = rtol = 5·2^-10; quantized
precisions: integer results may be off by one. Non-float outputs must match
exactly except under quantized precisions. This module is the one place that
knows these numbers: tests and the conformance runner call it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

QUANTIZED = ("int8", "uint8")


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    int_off_by: int = 0

    def describe(self) -> str:
        return f"atol={self.atol:g} rtol={self.rtol:g} int_off_by={self.int_off_by}"


def policy(precision: str = "fp32", case_atol: float = 0.0, case_rtol: float = 0.0) -> Tolerance:
    """The tolerance for one precision, loosened to a case's own where that is looser."""
    if precision == "fp32":
        return Tolerance(max(1e-5, case_atol), max(5 * 2.0 ** -23, case_rtol))
    if precision == "fp16":
        return Tolerance(max(5 * 2.0 ** -10, case_atol), max(5 * 2.0 ** -10, case_rtol))
    if precision in QUANTIZED or precision == "mixed":
        return Tolerance(max(5 * 2.0 ** -10, case_atol), max(5 * 2.0 ** -10, case_rtol), 1)
    raise ValueError(f"unknown precision '{precision}'; expected fp32, fp16, int8, uint8 or mixed")


def compare(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> str | None:
    """None when ``actual`` matches ``expected`` under ``tol``, else why not."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, expected {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {actual.shape}, expected {expected.shape}"
    if expected.dtype == object:
        if all(a == e for a, e in zip(actual.ravel(), expected.ravel())):
            return None
        return "string values differ"
    if expected.dtype.kind in "fc":
        a = actual.astype(np.complex128 if expected.dtype.kind == "c" else np.float64)
        e = expected.astype(a.dtype)
        nan_a, nan_e = np.isnan(a), np.isnan(e)
        if not np.array_equal(nan_a, nan_e):
            return f"NaN at {int(np.sum(nan_a ^ nan_e))} positions that differ"
        inf_e = np.isinf(e)
        if not np.array_equal(a[inf_e], e[inf_e]):
            return "infinities differ"
        mask = ~(nan_e | inf_e)
        diff = np.abs(a[mask] - e[mask])
        bound = tol.atol + tol.rtol * np.abs(e[mask])
        bad = diff > bound
        if np.any(bad):
            worst = int(np.argmax(diff - bound))
            return (f"{int(bad.sum())} of {diff.size} values off; worst |diff| {float(diff[worst]):.3g} "
                    f"> {float(bound[worst]):.3g} ({tol.describe()})")
        return None
    if expected.dtype == np.bool_:
        return None if np.array_equal(actual, expected) else f"{int(np.sum(actual != expected))} booleans differ"
    diff = np.abs(actual.astype(np.int64) - expected.astype(np.int64)) if expected.dtype != np.uint64 else \
        np.where(actual > expected, actual - expected, expected - actual)
    if np.any(diff > tol.int_off_by):
        return f"{int(np.sum(diff > tol.int_off_by))} of {diff.size} integers off by more than {tol.int_off_by}"
    return None
