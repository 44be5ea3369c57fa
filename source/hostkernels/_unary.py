"""Shared CPU kernels of the elementwise unary operators, and a vectorized float64 erf."""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import ClassVar

import numpy as np
from numpy.polynomial import chebyshev

from nnhal.graph.node import Node
from nnhal.hostkernels.base import Kernel, RunFn, store, ufunc_run


class UfuncKernel(Kernel):
    """y = ufunc(x), written straight into the output buffer."""

    ufunc: ClassVar[np.ufunc]
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        ufunc = self.ufunc

        def run(inputs, outputs):
            return (np.asarray(ufunc(inputs[0], out=outputs[0])),)

        return ufunc_run(run, ufunc)


class FormulaKernel(Kernel):
    """y = formula(x): float16 is computed in float32; the result is stored in the output dtype."""

    inplace = {0: 0}

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        """The op on ``x``; must return a new array (never ``x`` itself)."""
        raise NotImplementedError(f"{type(self).__name__}.formula")

    def prepare(self, node, ins, outs) -> RunFn:
        dtype = outs[0].dtype
        formula = self.formula

        def run(inputs, outputs):
            x = inputs[0]
            # NOTE: a 0-d array is computed as shape (1,): numpy turns 0-d results into scalars.
            # Overflow in a branch np.where discards (e^x of a large x) is expected, not reported.
            with np.errstate(over="ignore"):
                y = formula(node, widen(x.reshape(1) if x.ndim == 0 else x))
            return (store(np.reshape(y, x.shape), outputs[0], dtype or x.dtype),)

        return run


class GateKernel(Kernel):
    """A float32/float64 element-wise gate computed in place in the output buffer (one copy of the input
    first unless the planner gave the output the input's buffer), with no temporaries of the tensor's size:
    the in-place functions of _blocks that fused activations run too."""

    name = "fast"
    inplace = {0: 0}

    def gate(self, node: Node) -> Callable[[np.ndarray], None] | None:
        """The in-place function for this node, or None when this kernel does not take it."""
        raise NotImplementedError(f"{type(self).__name__}.gate")

    def score(self, node, ins, outs) -> int:
        fast = ins and ins[0] is not None and ins[0].dtype in (np.dtype(np.float32), np.dtype(np.float64)) \
            and outs[0].dtype == ins[0].dtype and self.gate(node) is not None
        return 2 if fast else 0

    def prepare(self, node, ins, outs) -> RunFn:
        gate = self.gate(node)

        def run(inputs, outputs):
            x = inputs[0]
            y = outputs[0]
            if y is None:
                y = x.copy()
            elif y is not x:
                np.copyto(y, x)
            gate(y)
            return (y,)

        return run


def widen(x: np.ndarray) -> np.ndarray:
    """float16 -> float32 (computing in half precision loses too much); others unchanged."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x) as a new array (e^-x overflowing to inf gives exactly 0)."""
    y = np.negative(x, out=np.empty_like(x))
    np.exp(y, out=y)
    y += 1
    return np.reciprocal(y, out=y)


def softplus(x: np.ndarray) -> np.ndarray:
    """ln(1 + e^x) as a new array, without overflow for large x."""
    return np.logaddexp(x, np.zeros((), x.dtype))


# ------------------------------------------------------------------------ erf
# NOTE: scipy is not a dependency. erf is interpolated piecewise by polynomials
# (Chebyshev interpolants converted to the power basis, well conditioned here)
# whose coefficients are computed once from the standard library's math.erf /
# math.erfc; relative error ~1e-14 over the whole line:
#   |x| < 1        erf(x) = x * P(x^2)
#   1 <= |x| < 6.5 erf(x) = sign(x) * (1 - exp(-x^2) * G(|x|)), G = erfc * exp(x^2)
#   |x| >= 6.5     erf(x) = sign(x)  (erfc(6.5) < 4e-20)
_PIECES = ((1.0, 3.0, 18), (3.0, 6.5, 18))


def _interpolate(f: Callable[[float], float], lo: float, hi: float, degree: int) -> np.ndarray:
    """Power-basis coefficients, in t = (2x - lo - hi) / (hi - lo), of ``f`` interpolated on [lo, hi]."""
    coeffs = chebyshev.chebinterpolate(
        lambda t: np.array([f(lo + (hi - lo) * (float(v) + 1.0) / 2.0) for v in t]), degree)
    return chebyshev.cheb2poly(coeffs)


def _erf_over_x(u: float) -> float:
    x = math.sqrt(u)
    return math.erf(x) / x if x > 0 else 2.0 / math.sqrt(math.pi)


def _scaled_erfc(x: float) -> float:
    return math.erfc(x) * math.exp(x * x)


@lru_cache(maxsize=None)
def _erf_tables() -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    small = _interpolate(_erf_over_x, 0.0, 1.0, 12)
    return small, tuple(_interpolate(_scaled_erfc, lo, hi, deg) for lo, hi, deg in _PIECES)


def _horner(t: np.ndarray, coeffs: np.ndarray) -> np.ndarray:
    """sum(coeffs[k] * t**k), evaluated in place in a new array."""
    acc = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc *= t
        acc += c
    return acc


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, elementwise, as a new float64 array."""
    x = np.asarray(x, dtype=np.float64)
    small, pieces = _erf_tables()
    a = np.abs(x)
    y = np.sign(x, out=np.empty_like(x))
    mask = a < 1.0
    s = x[mask]
    y[mask] = s * _horner(2.0 * s * s - 1.0, small)
    for (lo, hi, _), coeffs in zip(_PIECES, pieces):
        mask = (a >= lo) & (a < hi)
        s = a[mask]
        erfc = np.exp(-s * s) * _horner((2.0 * s - (lo + hi)) / (hi - lo), coeffs)
        y[mask] = np.copysign(1.0 - erfc, x[mask])
    return y


# ----------------------------------------------------------------------- cast
def convert(x: np.ndarray, dtype: np.dtype, out: np.ndarray | None) -> np.ndarray:
    """x converted to ``dtype`` (ONNX Cast): a new array, or written into ``out``.

    Floats truncate toward zero into integers; strings are parsed as numbers
    and numbers printed as strings.
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "O":
        result = x.astype(str).astype(object)
    elif x.dtype == object:
        result = _parse(x, dtype)
    else:
        return store(x, out, dtype) if out is not None else x.astype(dtype)
    return store(result, out, dtype)


def _parse(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Numbers from an array of strings; ValueError naming a string that is no number."""
    try:
        return _parse_numbers(x, dtype)
    except (ValueError, TypeError):
        bad = next((v for v in x.reshape(-1) if not _is_number(v)), None)
        raise ValueError(f"cannot cast the string {bad!r} to {dtype}: it is not a number") from None


def _is_number(value: object) -> bool:
    try:
        float(value)
    except (ValueError, TypeError):
        return False
    return True


def _parse_numbers(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        try:
            return x.astype(dtype)
        except (ValueError, OverflowError):
            return x.astype(np.float64).astype(dtype)
    if dtype.kind == "b":
        return x.astype(np.float64) != 0
    return x.astype(np.float64).astype(dtype) if dtype != np.float64 else x.astype(np.float64)
