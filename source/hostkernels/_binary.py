"""Shared CPU kernels of elementwise binary and variadic operators (Add, Less, Max, ...)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.base import Kernel, RunFn, ufunc_run
from nnhal.operator.base import Info

BinaryFn = Callable[..., Any]  # fn(a, b, out=None) -> array, like a numpy ufunc


def put(result: Any, out: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
    """Store ``result`` into ``out`` (casting), or return it as an array of ``dtype``."""
    if out is None:
        return np.asarray(result).astype(dtype, copy=False)
    np.copyto(out, result, casting="unsafe")
    return out


def binary_run(fn: BinaryFn) -> RunFn:
    """The run function applying ``fn`` to the two inputs, into the output buffer when there is one."""
    def run(inputs: list, outputs: list) -> tuple:
        out = outputs[0]
        result = fn(inputs[0], inputs[1], out=out)
        # NOTE: ufuncs return numpy scalars for 0-d operands when out is None.
        return (result if out is not None else np.asarray(result),)

    return ufunc_run(run, fn)


class BinaryKernel(Kernel):
    """A binary op computed by one function ``fn(a, b, out=None)``, by default the class's numpy ufunc."""

    inplace = {0: 0}
    ufunc: ClassVar[np.ufunc]

    def function(self, node: Node, ins: list[Info | None], outs: list[Info]) -> BinaryFn:
        """The function computing this node; override to choose by attribute or dtype."""
        return self.ufunc

    def prepare(self, node: Node, ins: list[Info | None], outs: list[Info]) -> RunFn:
        return binary_run(self.function(node, ins, outs))


class CompareKernel(BinaryKernel):
    """A binary op with a bool result: it never overwrites its (differently typed) input."""

    inplace: ClassVar[dict[int, int]] = {}


class VariadicKernel(Kernel):
    """An op folding one or more inputs with a numpy ufunc (Max, Min, Sum)."""

    inplace = {0: 0}
    ufunc: ClassVar[np.ufunc]

    def prepare(self, node: Node, ins: list[Info | None], outs: list[Info]) -> RunFn:
        fold = self.ufunc

        def run(inputs: list, outputs: list) -> tuple:
            return (reduce_inputs(fold, inputs, outputs[0]),)

        return run


def reduce_inputs(fold: np.ufunc, inputs: list, out: np.ndarray | None) -> np.ndarray:
    """fold(...fold(fold(x0, x1), x2)..., xn) with broadcasting, into ``out`` when given."""
    if out is None:
        out = np.empty(np.broadcast_shapes(*(np.shape(x) for x in inputs)), dtype=inputs[0].dtype)
    if len(inputs) == 1:
        np.copyto(out, inputs[0])
        return out
    fold(inputs[0], inputs[1], out=out)
    for x in inputs[2:]:
        fold(out, x, out=out)
    return out


# ------------------------------------------------------------ integer math
def trunc_divide(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Integer division rounding toward zero (C, ONNX), not toward -inf like numpy."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if a.dtype.kind == "u":
            return np.floor_divide(a, b, out=out)
        # NOTE: the correction is computed before ``out`` (possibly ``a`` itself) is written.
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        quotient = np.asarray(np.floor_divide(a, b, out=out))
        return np.add(quotient, fix, out=quotient, casting="unsafe")


_U64 = np.dtype(np.uint64)
_BIG_EXPONENT = np.uint64(1 << 62)


def int_power(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Exact integer a ** b (wrapping like C), with a's dtype; negative exponents give 1/a**n truncated."""
    a, b = np.asarray(a), np.asarray(b)
    negative = b < 0 if b.dtype.kind == "i" else None
    exponent = (np.where(negative, 0, b) if negative is not None else b).astype(_U64)
    if b.dtype == _U64:
        # NOTE: powers mod 2**64 repeat with period dividing 2**62 (odd bases) or vanish
        # (even bases), so huge exponents fold into [2**62, 2**63) without changing the result.
        exponent = np.where(exponent >= _BIG_EXPONENT, (exponent & (_BIG_EXPONENT - 1)) | _BIG_EXPONENT, exponent)
    # NOTE: multiplication mod 2**64 is the same for signed and unsigned bit patterns.
    result = np.power(a.astype(_U64), exponent).astype(a.dtype)
    if negative is not None and negative.any():
        odd = (b & 1).astype(np.bool_)
        inverse = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)).astype(a.dtype)
        result = np.where(negative, inverse, result)
    return put(result, out, a.dtype)


def power(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a ** b for any numeric dtypes, exact for integers, with a's dtype."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return int_power(a, b, out)
    with np.errstate(all="ignore"):
        if a.dtype == b.dtype:
            return np.asarray(np.power(a, b, out=out))
        return put(np.power(a, b), out, a.dtype)


def shift(a: np.ndarray, b: np.ndarray, left: bool, out: np.ndarray | None = None) -> np.ndarray:
    """Bit shift per ONNX: arithmetic right shift for signed ints; out-of-range amounts give the sign fill."""
    a, b = np.asarray(a), np.asarray(b)
    bits = 8 * a.dtype.itemsize
    signed = a.dtype.kind == "i"
    outside = (b >= bits) | (b < 0) if signed else b >= bits
    if signed and not left:
        # NOTE: an arithmetic shift by bits-1 is exactly the fill (-1 or 0) ONNX asks for.
        amount = np.where(outside, bits - 1, b).astype(a.dtype)
        return np.asarray(np.right_shift(a, amount, out=out))
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    amount = np.where(outside, 0, b).astype(unsigned)
    op = np.left_shift if left else np.right_shift
    moved = op(a.astype(unsigned, copy=False), amount)
    return put(np.where(outside, np.zeros((), unsigned), moved), out, a.dtype)
