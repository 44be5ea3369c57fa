"""The tolerance policy, per precision (Android NNAPI CTS).

fp32: per-op atol 1e-5 and rtol 5·2^-23, loosened to a test case's own
tolerance where that is looser; fp16: atol = rtol = 5·2^-10; quantized
precisions: integer results may be off by one. Non-float outputs must match
exactly except under quantized precisions. This module is the one place that
knows these numbers: tests and the conformance runner call it.

The device kit's policy (:func:`kit_policy`, used by ``nnhal.testing``, ``nnhal validate`` and the
random-graph tester) does *not* loosen to a case's own tolerance: the ONNX node cases carry rtol 1e-3,
under which an output scaled by 1.001 passes. At fp32 an ordinary op gets NNAPI's numbers; an op whose
float result legitimately depends on summation order or on the math library gets the documented slack
of :data:`OP_SLACK` (still ten times tighter than a 1e-3 error).
"""
from __future__ import annotations

from collections.abc import Iterable
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


# fp32 rtol slack per op kind (the kit's policy, see kit_policy). Accumulations (dot products, convolutions,
# reductions, normalizations over a whole axis) round once per term in an order the device chooses: the
# reference's order is one of many correct ones. Transcendental functions come from a math library whose
# results may differ by a few units in the last place, amplified by the op's own arithmetic.
ACCUMULATION_RTOL = 1e-4
TRANSCENDENTAL_RTOL = 2e-5
ACCUMULATING = frozenset({
    "AveragePool", "BatchNormalization", "Conv", "ConvInteger", "ConvTranspose", "CumSum", "DFT", "Det", "Einsum",
    "Gemm", "GlobalAveragePool", "GlobalLpPool", "GroupNormalization", "GRU", "InstanceNormalization",
    "LayerNormalization", "LpNormalization", "LpPool", "LRN", "LSTM", "MatMul", "MeanVarianceNormalization",
    "NegativeLogLikelihoodLoss", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMean",
    "ReduceProd", "ReduceSum", "ReduceSumSquare", "RMSNormalization", "RNN", "STFT", "SoftmaxCrossEntropyLoss",
    "Softmax", "LogSoftmax", "Hardmax", "Attention", "Mean", "Sum", "Resize", "Upsample", "RoiAlign",
    "GridSample", "AffineGrid", "MelWeightMatrix", "BlackmanWindow", "HammingWindow", "HannWindow",
})
TRANSCENDENTAL = frozenset({
    "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Celu", "Cos", "Cosh", "Elu", "Erf", "Exp", "Gelu",
    "HardSigmoid", "HardSwish", "Log", "Mish", "Pow", "Selu", "Sigmoid", "Sin", "Sinh", "Softplus", "Softsign",
    "Sqrt", "Reciprocal", "Tan", "Tanh", "ThresholdedRelu", "Swish",
})


# Node cases whose expected outputs are stored rounded to 4 significant digits (the onnx generator printed
# them so): a correct float32 result differs from them by up to half a unit of the 4th digit, ~3.3e-4 of the
# value. The kit allows CASE_DATA_RTOL for these cases alone (ops: AveragePool, GridSample, RoiAlign).
CASE_DATA_RTOL = 5e-4
ROUNDED_CASES = frozenset({"test_averagepool_2d_ceil_last_window_starts_on_pad", "test_gridsample_bicubic",
                           "test_roialign_aligned_false", "test_roialign_aligned_true"})


def op_slack(op: str) -> float:
    """The fp32 rtol slack the kit allows for ``op`` (0 for an ordinary op)."""
    if op in ACCUMULATING:
        return ACCUMULATION_RTOL
    if op in TRANSCENDENTAL:
        return TRANSCENDENTAL_RTOL
    return 0.0


def kit_policy(precision: str = "fp32", ops: Iterable[str] = (), case: str = "") -> Tolerance:
    """The device kit's tolerance for an output of a graph of ``ops`` at ``precision``: :func:`policy`'s numbers,
    never loosened to a test case's own, with the largest :func:`op_slack` of ``ops`` at fp32 (fp16 and the
    quantized precisions are already looser than any slack), and CASE_DATA_RTOL for a case named in
    ROUNDED_CASES."""
    base = policy(precision)
    if precision != "fp32":
        return base
    slack = [op_slack(op) for op in ops] + ([CASE_DATA_RTOL] if case in ROUNDED_CASES else [])
    return Tolerance(base.atol, max([base.rtol, *slack]))


# Quantized precisions compare float outputs to the grid: QUANTIZED_STEPS 8-bit steps of the widest float
# range involved (the core rounds float inputs to the calibrated grid, half a step; the device rounds its
# output, half a step, and may be off by one, as NNAPI allows).
QUANTIZED_STEPS = 2


def quantized_atol(arrays: Iterable[np.ndarray]) -> float:
    """QUANTIZED_STEPS 8-bit steps of the widest finite range (widened to include zero) of the float ``arrays``."""
    widths = [0.0]
    for a in arrays:
        a = np.asarray(a)
        finite = a[np.isfinite(a)] if a.dtype.kind == "f" else a[:0]
        if finite.size:
            widths.append(float(max(finite.max(), 0.0) - min(finite.min(), 0.0)))
    return QUANTIZED_STEPS * max(widths) / 255.0


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
