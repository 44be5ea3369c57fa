"""Shared CPU kernel code of the reduction, arg, softmax, scan, loss, spectral and window operators."""
from __future__ import annotations

from typing import Callable

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.operator._reduce import reduction_axes, softmax_axes
from nnhal.operator.table import get_prototype

Reducer = Callable[[np.ndarray, tuple, bool], np.ndarray]


# ----------------------------------------------------------------- reductions
def lowest(dtype: np.dtype) -> float | int | bool:
    """The identity of max for a dtype: -inf, the smallest integer, or False."""
    if dtype == np.bool_:
        return False
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return -np.inf


def highest(dtype: np.dtype) -> float | int | bool:
    """The identity of min for a dtype: +inf, the largest integer, or True."""
    if dtype == np.bool_:
        return True
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    return np.inf


def reduce_sum(x: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray:
    return np.add.reduce(x, axis=axes, dtype=x.dtype, keepdims=keepdims)


def reduce_max(x: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray:
    return np.maximum.reduce(x, axis=axes, keepdims=keepdims, initial=lowest(x.dtype))


def reduce_min(x: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray:
    return np.minimum.reduce(x, axis=axes, keepdims=keepdims, initial=highest(x.dtype))


def reduce_mean(x: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray:
    return np.mean(x, axis=axes, dtype=x.dtype, keepdims=keepdims)


def reduce_prod(x: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray:
    return np.multiply.reduce(x, axis=axes, dtype=x.dtype, keepdims=keepdims)


def reduce_l1(x: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray:
    return np.add.reduce(np.abs(x), axis=axes, dtype=x.dtype, keepdims=keepdims)


def reduce_sum_square(x: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray:
    return np.add.reduce(np.square(x), axis=axes, dtype=x.dtype, keepdims=keepdims)


def reduce_l2(x: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray:
    # NOTE: integer inputs are squared and summed in int64, rooted in float64, then truncated.
    wide = x.astype(np.int64) if x.dtype.kind in "iu" else x
    return np.sqrt(np.add.reduce(np.square(wide), axis=axes, keepdims=keepdims))


def reduce_log_sum(x: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray:
    return np.log(np.add.reduce(x, axis=axes, dtype=x.dtype, keepdims=keepdims))


def reduce_log_sum_exp(x: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray:
    if x.dtype.kind in "iub":
        x = x.astype(np.float64)
    top = np.maximum.reduce(x, axis=axes, keepdims=True, initial=-np.inf)
    # NOTE: an infinite maximum (all -inf, empty set, or +inf) is not subtracted, so no inf - inf.
    top = np.where(np.isfinite(top), top, np.zeros((), x.dtype))
    total = np.add.reduce(np.exp(x - top), axis=axes, keepdims=True)
    out = np.log(total) + top
    if not keepdims:
        out = out.reshape([d for i, d in enumerate(out.shape) if i not in axes])
    return out


class ReduceKernel(Kernel):
    """A Reduce* kernel; subclasses set ``op_type`` and ``reducer``."""

    reducer: Reducer

    def prepare(self, node, ins, outs) -> RunFn:
        since = get_prototype(node.domain, node.op_type).axes_input_since
        keepdims = bool(node.attrs["keepdims"])
        dtype = outs[0].dtype
        reducer = type(self).reducer

        def run(inputs, outputs):
            x = inputs[0]
            if node.version < since:
                axes = node.attrs["axes"]
            else:
                axes = inputs[1] if len(inputs) > 1 else None
            picked = reduction_axes(node, x.ndim, axes)
            return (store(reducer(x, picked, keepdims), outputs[0], dtype),)

        return run


# ------------------------------------------------------------ softmax family
def log_softmax(x: np.ndarray, axes: tuple) -> np.ndarray:
    """Numerically stable log-softmax over ``axes``."""
    top = np.max(x, axis=axes, keepdims=True)
    top = np.where(np.isfinite(top), top, np.zeros((), x.dtype))
    shifted = x - top
    return shifted - np.log(np.sum(np.exp(shifted), axis=axes, keepdims=True))


def softmax(x: np.ndarray, axes: tuple) -> np.ndarray:
    """Numerically stable softmax over ``axes``."""
    top = np.max(x, axis=axes, keepdims=True)
    top = np.where(np.isfinite(top), top, np.zeros((), x.dtype))
    e = np.exp(x - top)
    e /= np.sum(e, axis=axes, keepdims=True)
    return e


class SoftmaxFamilyKernel(Kernel):
    """Softmax-like kernel over the node's axes; subclasses set ``function``."""

    function: Callable[[np.ndarray, tuple], np.ndarray]

    def prepare(self, node, ins, outs) -> RunFn:
        dtype = outs[0].dtype
        function = type(self).function

        def run(inputs, outputs):
            x = inputs[0]
            if x.size == 0:
                return (store(np.empty(x.shape, x.dtype), outputs[0], dtype),)
            return (store(function(x, softmax_axes(node, x.ndim)), outputs[0], dtype),)

        return run


# ------------------------------------------------------------------- arg ops
class ArgKernel(Kernel):
    """ArgMax / ArgMin; subclasses set ``op_type`` and ``finder`` (np.argmax or np.argmin)."""

    finder: Callable[..., np.ndarray]

    def prepare(self, node, ins, outs) -> RunFn:
        keepdims = bool(node.attrs["keepdims"])
        last = bool(node.attrs.get("select_last_index", 0))
        finder = type(self).finder

        def run(inputs, outputs):
            x = inputs[0]
            axis = node.attrs["axis"] % max(x.ndim, 1)
            if last:
                # NOTE: the last extreme is the first one of the reversed axis.
                flipped = finder(np.flip(x, axis), axis=axis, keepdims=keepdims)
                index = x.shape[axis] - 1 - flipped
            else:
                index = finder(x, axis=axis, keepdims=keepdims)
            return (store(index.astype(np.int64, copy=False), outputs[0], np.dtype(np.int64)),)

        return run


def hardmax(x: np.ndarray, axes: tuple) -> np.ndarray:
    """1 at the first maximum over ``axes`` (contiguous), 0 elsewhere."""
    first, last = axes[0], axes[-1]
    lead, span = x.shape[:first], x.shape[first:last + 1]
    flat = x.reshape(lead + (-1,) + x.shape[last + 1:])
    index = np.argmax(flat, axis=first, keepdims=True)
    positions = np.arange(flat.shape[first]).reshape((-1,) + (1,) * (flat.ndim - first - 1))
    return (positions == index).astype(x.dtype).reshape(lead + span + x.shape[last + 1:])


# ---------------------------------------------------------------- cumulative
def shift_in(y: np.ndarray, axis: int, identity: int) -> np.ndarray:
    """``y`` shifted by one along ``axis``, the identity entering at index 0."""
    out = np.empty_like(y)
    head = (slice(None),) * axis
    out[head + (slice(0, 1),)] = identity
    out[head + (slice(1, None),)] = y[head + (slice(None, -1),)]
    return out


class CumulativeKernel(Kernel):
    """CumSum / CumProd; subclasses set ``op_type``, ``ufunc`` and its ``identity``."""

    ufunc: np.ufunc
    identity: int

    def prepare(self, node, ins, outs) -> RunFn:
        exclusive = bool(node.attrs["exclusive"])
        reverse = bool(node.attrs["reverse"])
        ufunc, identity = type(self).ufunc, type(self).identity
        dtype = outs[0].dtype

        def run(inputs, outputs):
            x = inputs[0]
            axis = int(np.asarray(inputs[1]).ravel()[0]) % max(x.ndim, 1)
            if reverse:
                x = np.flip(x, axis)
            y = ufunc.accumulate(x, axis=axis, dtype=x.dtype)
            if exclusive:
                y = shift_in(y, axis, identity)
            if reverse:
                y = np.flip(y, axis)
            return (store(y, outputs[0], dtype),)

        return run


# --------------------------------------------------------------------- losses
def nll_loss(x: np.ndarray, target: np.ndarray, weight: np.ndarray | None, reduction: str,
             ignore_index: int | None) -> np.ndarray:
    """Negative log-likelihood of log-probabilities ``x`` (N, C, d...) at ``target`` (N, d...)."""
    keep = np.ones(target.shape, bool) if ignore_index is None else target != ignore_index
    safe = np.where(keep, target, 0).astype(np.int64)
    picked = np.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    w = np.ones((), x.dtype) if weight is None else weight[safe]
    w = np.where(keep, w, np.zeros((), x.dtype)).astype(x.dtype)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.sum(loss, dtype=x.dtype)
    return np.sum(loss, dtype=x.dtype) / np.sum(w, dtype=x.dtype)


class LossKernel(Kernel):
    """NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss; ``log_softmax_first`` for the latter."""

    log_softmax_first: bool = False

    def prepare(self, node, ins, outs) -> RunFn:
        reduction, ignore = node.attrs["reduction"], node.attrs["ignore_index"]
        dtypes = [o.dtype for o in outs]
        with_log_prob = len(node.outputs) > 1 and bool(node.outputs[1])
        first = self.log_softmax_first

        def run(inputs, outputs):
            x, target = inputs[0], inputs[1]
            weight = inputs[2] if len(inputs) > 2 else None
            if first:
                x = log_softmax(x, (1,))
            loss = store(nll_loss(x, target, weight, reduction, ignore), outputs[0], dtypes[0])
            if not with_log_prob:
                return (loss,) + (None,) * (len(outputs) - 1)
            return (loss, store(x, outputs[1], dtypes[1]))

        return run


# ------------------------------------------------------------------ spectral
def to_complex(x: np.ndarray) -> np.ndarray:
    """(..., 1) real or (..., 2) real/imaginary pairs -> complex128 (...)."""
    x = x.astype(np.float64)
    if x.shape[-1] == 1:
        return x[..., 0].astype(np.complex128)
    return x[..., 0] + 1j * x[..., 1]


def from_complex(z: np.ndarray) -> np.ndarray:
    """complex (...) -> (..., 2) real/imaginary pairs."""
    return np.stack([z.real, z.imag], axis=-1)


# ------------------------------------------------------------------- windows
# NOTE: the formulas keep the ONNX reference's order of operations, so integer
# output types truncate the same values the same way.
def hann(n: np.ndarray, period: int) -> np.ndarray:
    """Hann window: sin^2(pi n / N)."""
    return np.sin(n * np.pi / period) ** 2


def hamming(n: np.ndarray, period: int) -> np.ndarray:
    """Hamming window: alpha - beta cos(2 pi n / N), alpha = 25/46."""
    alpha = 25.0 / 46.0
    return alpha - np.cos(n * np.pi * 2 / period) * (1.0 - alpha)


def blackman(n: np.ndarray, period: int) -> np.ndarray:
    """Blackman window: 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)."""
    y = np.cos(n * (np.pi * 2) / period) * -0.5
    y += np.cos(n * (np.pi * 4) / period) * 0.08
    return y + 0.42


class WindowKernel(Kernel):
    """A window generator; subclasses set ``op_type`` and ``shape`` (of n and the period N)."""

    shape: Callable[[np.ndarray, int], np.ndarray]

    def prepare(self, node, ins, outs) -> RunFn:
        periodic = bool(node.attrs["periodic"])
        dtype = outs[0].dtype
        shape = type(self).shape

        def run(inputs, outputs):
            size = int(np.asarray(inputs[0]).ravel()[0])
            # NOTE: the symmetric window divides by size - 1, as the ONNX formula says (nan for size 1).
            period = size if periodic else size - 1
            with np.errstate(divide="ignore", invalid="ignore"):
                values = shape(np.arange(size, dtype=np.float64), period)
            return (store(values, outputs[0], dtype),)

        return run
