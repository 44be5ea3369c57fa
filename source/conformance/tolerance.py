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

Reordered reductions (``gamma``, ``reduction_bound``, ``matmul_bound``,
``within_bound``). Two evaluations of the same sum of K products, by different
BLAS kernels (OpenBLAS core types, MKL, Accelerate, Arm), block sizes, thread
splits or FMA use, differ in the last bits. The bound used is the rigorous one,
linear in K, not the probabilistic sqrt(K) one: with unit roundoff u (2^-24 for
float32), any evaluation order of ``sum_k a_k b_k`` with or without FMA has
error at most gamma_K * sum_k |a_k b_k|, gamma_K = K u / (1 - K u) (Higham,
Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.5 and §3.5).
sqrt(K) u holds only with high probability for random rounding errors (Higham
and Mary 2019), and a test verdict must not be a probability; linear K is still
tight enough that a wrong index, a dropped term or a wrong operand is far
outside it. For a chain of products A1 @ A2 @ ... the inner dimensions add:
(1 + theta_j)(1 + theta_k) = 1 + theta_(j+k) (Higham Lemma 3.3), so the error is
at most gamma_(K1+K2+...) |A1| @ |A2| @ ... . One more rounding, of a result
accumulated wider (float64 in a reference) to the output type, adds one to the
count. Two computed sides each carry their own error, so the bound between
them is twice that. The magnitude term |A| @ |B| is computed in float64 from
the actual operands (cheap next to the test), not max|a| max|b| K, so it stays
tight where the operands are mostly small. A sum stored narrower (float16
storage of a float32 sum, ``rounded_within``) must be the rounding of some value
within that bound of the wide result: rounding is monotone, so it lies between
the roundings of wide - bound and wide + bound (one value where no rounding
boundary lies within the bound). The bounds assume no underflow or overflow
(numbers of the size tests use).

Quantized results (``steps_off``) are compared in quantization steps against a
reference fed the engine's own inputs to the layer (tests/oracles.py
layerwise_reference), so differences cannot cascade. One step is allowed: the
float value before rounding differs between the two sides by at most the
reduction bound above, which moves the rounded integer only where the value
lies within that bound of a rounding boundary (a half step), and then by
exactly one step, as long as the bound is below half a step (true for
calibrated ranges: the bound is a few 1e-4 of sum |a b| for K in the
thousands, while a step is range/255).
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


STORED_ULPS = 5      # the rtol floor of a float output, in units of its own dtype's eps (see compare)


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
        # NNAPI's rtol is 5 units in the last place of the type computed in (5·2^-23 for fp32); an output
        # *stored* narrower (a float16 tensor under any precision) cannot be closer than its own ulps, so its
        # rtol is at least 5 ulps of the stored type (a device rounding once from float32 is 1 ulp off).
        rtol = max(tol.rtol, STORED_ULPS * float(np.finfo(expected.dtype).eps)) if expected.dtype.kind == "f" \
            else tol.rtol
        bound = tol.atol + rtol * np.abs(e[mask])
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


def unit_roundoff(dtype=np.float32) -> float:
    """u: half the spacing of ``dtype`` at 1 (2^-24 for float32, 2^-11 for float16)."""
    return float(np.finfo(dtype).eps) / 2


def gamma(n: int, dtype=np.float32) -> float:
    """gamma_n = n u / (1 - n u): the relative error of n roundings of ``dtype`` (Higham Lemma 3.1)."""
    nu = n * unit_roundoff(dtype)
    if nu >= 1:
        raise ValueError(f"gamma_{n} is unbounded for {np.dtype(dtype).name} (n u = {nu:g} >= 1)")
    return nu / (1 - nu)


def reduction_bound(abs_sum: np.ndarray, k: int, dtype=np.float32) -> np.ndarray:
    """The most by which two evaluations of a sum of ``k`` products can differ, in any order, blocking or
    FMA use, elementwise: 2 gamma_(k+1) |terms|, with ``abs_sum`` the sum of the terms' absolute values
    (the + 1 covers a final rounding of a wider accumulator to ``dtype``)."""
    return 2 * gamma(k + 1, dtype) * np.asarray(abs_sum, np.float64)


def matmul_bound(*factors: np.ndarray, dtype=np.float32) -> np.ndarray:
    """The bound of ``reduction_bound`` for the chain product factors[0] @ factors[1] @ ... (numpy matmul
    broadcasting), whose error terms add along the chain: gamma over the sum of the inner dimensions,
    times |A1| @ |A2| @ ... in float64. A 1-D factor is a vector, as in numpy."""
    inner = sum(np.shape(f)[-1] for f in factors[:-1])
    magnitude = np.abs(np.asarray(factors[0], np.float64))
    for f in factors[1:]:
        magnitude = magnitude @ np.abs(np.asarray(f, np.float64))
    return reduction_bound(magnitude, inner, dtype)


def within_bound(actual: np.ndarray, expected: np.ndarray, bound: np.ndarray | float) -> str | None:
    """None when |actual - expected| <= bound elementwise (float64, broadcast), else why not."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return f"shape {actual.shape}, expected {expected.shape}"
    diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    excess = diff - np.broadcast_to(np.asarray(bound, np.float64), diff.shape)
    bad = ~(excess <= 0)                         # NaN in either side is a failure too
    if not np.any(bad):
        return None
    worst = np.unravel_index(int(np.argmax(np.where(np.isnan(excess), np.inf, excess))), diff.shape)
    return (f"{int(bad.sum())} of {diff.size} values off; worst at {tuple(int(i) for i in worst)}: "
            f"|{float(actual[worst]):.9g} - {float(expected[worst]):.9g}| = {float(diff[worst]):.3g} "
            f"> bound {float(diff[worst] - excess[worst]):.3g}")


def assert_within_bound(actual: np.ndarray, expected: np.ndarray, bound: np.ndarray | float) -> None:
    """``within_bound`` for tests: AssertionError saying why when ``actual`` is outside the bound."""
    why = within_bound(actual, expected, bound)
    if why is not None:
        raise AssertionError(why)


def steps_off(actual: np.ndarray, expected: np.ndarray, allowed: int = 1) -> str | None:
    """None when the quantized integers ``actual`` and ``expected`` differ by at most ``allowed`` steps
    (see the module docstring for why one), else how many differ by more and by how much."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return f"{actual.dtype}{actual.shape}, expected {expected.dtype}{expected.shape}"
    diff = np.abs(actual.astype(np.int64) - expected.astype(np.int64))
    if int(diff.max(initial=0)) <= allowed:
        return None
    return (f"{int(np.sum(diff > allowed))} of {diff.size} values off by more than {allowed} step(s), "
            f"up to {int(diff.max())}")


def rounded_within(actual: np.ndarray, wide: np.ndarray, bound: np.ndarray | float, dtype) -> str | None:
    """None when ``actual`` is a ``dtype`` value (float16 storage of a float32 sum, say) that rounding some
    value within ``bound`` of ``wide`` gives, else why not. Rounding is monotone, so those are the ``dtype``
    values from the rounding of wide - bound to that of wide + bound: exactly one where no rounding boundary
    lies within the bound, so this is bit equality wherever the summation order cannot matter."""
    wide64 = np.asarray(wide, np.float64)
    lo = (wide64 - bound).astype(dtype).astype(np.float64)
    hi = (wide64 + bound).astype(dtype).astype(np.float64)
    got = np.asarray(actual, np.float64)
    bad = ~((lo <= got) & (got <= hi) & (got.astype(dtype).astype(np.float64) == got))
    if not np.any(bad):
        return None
    first = tuple(int(i[0]) for i in np.nonzero(bad))
    return (f"{int(bad.sum())} of {got.size} values are not {np.dtype(dtype).name} roundings of the wide result "
            f"within its bound; first at {first}: {got[first]:.9g}, expected {lo[first]:.9g} to {hi[first]:.9g}")
