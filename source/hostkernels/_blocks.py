"""ufuncs against repeated blocks: the fast way to broadcast a scalar or a short vector in numpy.

numpy's loops are slow when one operand repeats along the outer loop with
stride 0 (a scalar, or a per-channel vector against (pixels, C)): on this
project's benchmark machine (numpy 2.4, AVX-512) ``np.maximum(y, 0, out=y)``
on 802,816 float32 costs 260 us, while the same call against a contiguous
block of zeros, with ``y`` seen as rows of that block's length, costs
63-67 us (add, multiply and divide by a scalar are fast; against a vector
repeated along rows they are not: 1536x128 + 128 takes 27 us broadcast, 13 us
blockwise). ``blockwise`` runs a ufunc that way over a flat array; ``clamp``
and ``relu`` are Relu/Clip built on it (NaN propagates as with the plain
call: the same ufuncs run), ``tiled`` makes the block of a per-channel
vector for channels-last data.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# length of the repeated blocks (16K measured as fast as 64K, and fastest for channels-last BatchNormalization)
BLOCK = 1 << 14
_constants: dict[tuple, np.ndarray] = {}


def constant(value, dtype: np.dtype) -> np.ndarray:
    """A read-only block of BLOCK elements equal to ``value`` (cached)."""
    key = (np.dtype(dtype).str, float(value))
    b = _constants.get(key)
    if b is None:
        b = np.full(BLOCK, value, dtype=dtype)
        b.flags.writeable = False
        _constants[key] = b
    return b


def tiled(vector: np.ndarray) -> np.ndarray:
    """A per-channel vector repeated to about BLOCK elements: the block of a channels-last operand."""
    return np.tile(vector, max(1, BLOCK // vector.size))


def blockwise(ufunc: np.ufunc, x: np.ndarray, block: np.ndarray, out: np.ndarray) -> None:
    """ufunc(x, block repeated along x) into out; x and out flat and contiguous, x.size a multiple of
    the block's period (a constant block: any size)."""
    n, b = x.size, block.size
    whole = n - n % b
    if whole:
        ufunc(x[:whole].reshape(-1, b), block, out=out[:whole].reshape(-1, b))
    if whole < n:
        ufunc(x[whole:], block[:n - whole], out=out[whole:])


def clamp(x: np.ndarray, lo, hi, out: np.ndarray | None = None) -> np.ndarray:
    """out = min(max(x, lo), hi), either bound may be None (no bound; both None copies).

    ``out`` may be ``x`` (in place) or None (a new array). The bounds are cast to x's dtype first."""
    if out is None:
        out = np.empty_like(x)
    fast = x.dtype.kind == "f" and x.flags.c_contiguous and out.flags.c_contiguous and out.shape == x.shape \
        and out.dtype == x.dtype and x.size >= 256
    lo = None if lo is None else x.dtype.type(lo)
    hi = None if hi is None else x.dtype.type(hi)
    if not fast:
        if lo is not None:
            np.maximum(x, lo, out=out)
        elif out is not x:
            np.copyto(out, x)
        if hi is not None:
            np.minimum(out, hi, out=out)
        return out
    xf, of = x.reshape(-1), out.reshape(-1)
    if lo is not None:
        blockwise(np.maximum, xf, constant(lo, x.dtype), of)
    elif out is not x:
        np.copyto(of, xf)
    if hi is not None:
        blockwise(np.minimum, of, constant(hi, x.dtype), of)
    return out


def relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """max(x, 0) into out (may be x)."""
    return clamp(x, 0, None, out)


# ------------------------------------------------------------- smooth and hard gates, in place
# NOTE: the gates that need a second operand (hardswish's and silu's x * gate(x)) run over CHUNK elements
# at a time with one per-thread temporary of that size, so the temporary stays in cache and no array of
# the tensor's size is allocated; a chunk of 64K float32 is 256 KiB, one L2's worth on the benchmark machine.
CHUNK = 1 << 16
_temps = threading.local()


def _temp(dtype: np.dtype) -> np.ndarray:
    """This thread's CHUNK-element temporary of ``dtype`` (one per dtype, made on first use)."""
    cache = getattr(_temps, "by_dtype", None)
    if cache is None:
        cache = _temps.by_dtype = {}
    t = cache.get(dtype.str)
    if t is None:
        t = cache[dtype.str] = np.empty(CHUNK, dtype)
    return t


def _chunks(y: np.ndarray):
    """Contiguous flat pieces of ``y`` (at most CHUNK elements each), or y itself when not contiguous."""
    if not y.flags.c_contiguous:
        yield y
        return
    flat = y.reshape(-1)
    for start in range(0, flat.size, CHUNK):
        yield flat[start:start + CHUNK]


def sigmoid_(y: np.ndarray) -> None:
    """y = 1 / (1 + e^-y) in place (e^-y overflowing to inf gives exactly 0)."""
    with np.errstate(over="ignore"):
        np.negative(y, out=y)
        np.exp(y, out=y)
    y += 1
    np.reciprocal(y, out=y)


def hardsigmoid_(y: np.ndarray, alpha: float, beta: float) -> None:
    """y = clamp(alpha * y + beta, 0, 1) in place."""
    y *= y.dtype.type(alpha)
    y += y.dtype.type(beta)
    clamp(y, 0, 1, y)


def hardswish_(y: np.ndarray) -> None:
    """y = y * clamp(y / 6 + 1 / 2, 0, 1) in place, computed as y * clamp(y + 3, 0, 6) / 6 (one pass
    fewer: 0.40 against 0.53 ms on 903K float32; the two differ by rounding, ~1e-7 relative)."""
    three, six, sixth = y.dtype.type(3), y.dtype.type(6), y.dtype.type(1.0 / 6.0)
    for piece in _chunks(y):
        t = _temp(y.dtype)[:piece.size].reshape(piece.shape) if piece.flags.c_contiguous else np.empty_like(piece)
        np.add(piece, three, out=t)
        np.clip(t, 0, six, out=t)
        piece *= t
        piece *= sixth


def silu_(y: np.ndarray) -> None:
    """y = y * sigmoid(y) in place."""
    for piece in _chunks(y):
        t = _temp(y.dtype)[:piece.size].reshape(piece.shape) if piece.flags.c_contiguous else np.empty_like(piece)
        with np.errstate(over="ignore"):
            np.negative(piece, out=t)
            np.exp(t, out=t)
        t += 1
        np.divide(piece, t, out=piece)


def tanh_(y: np.ndarray) -> None:
    """y = tanh(y) in place."""
    np.tanh(y, out=y)


@dataclass(frozen=True)
class Gates:
    """The in-place gates that fused activations run with (_scratch.apply_activation): numpy's here
    (NUMPY_GATES); a device passes its own (the cpu device's native ones, device/cpu/kernels/_gates.py)."""

    sigmoid_: Callable[[np.ndarray], None]
    silu_: Callable[[np.ndarray], None]
    hardswish_: Callable[[np.ndarray], None]
    hardsigmoid_: Callable[[np.ndarray, float, float], None]
    tanh_: Callable[[np.ndarray], None] = tanh_


NUMPY_GATES = Gates(sigmoid_, silu_, hardswish_, hardsigmoid_)
