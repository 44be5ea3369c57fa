"""Shared prototype code of the reduction, arg, softmax, scan, loss and window operators."""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from nnhal.errors import ModelError, ShapeError, UnsupportedTypeError, where
from nnhal.graph.dtypes import to_numpy
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, normalize_axis, same_as


# ----------------------------------------------------------------- reductions
def reduction_axes(node: Node, rank: int, axes: Any) -> tuple[int, ...]:
    """Normalized, sorted axes to reduce; () when the node reduces nothing (noop_with_empty_axes).

    ``axes`` is the attribute list or the axes input (None when absent).
    """
    values = [] if axes is None else [int(a) for a in np.asarray(axes).ravel()]
    if not values:
        if node.attrs.get("noop_with_empty_axes", 0):
            return ()
        return tuple(range(rank))
    if rank == 0:
        raise ShapeError(f"{where(node)}: axes {values} name axes of a scalar input")
    out = sorted(normalize_axis(node, a, rank) for a in values)
    if len(set(out)) != len(out):
        raise ModelError(f"{where(node)}: axes {values} has duplicates")
    return tuple(out)


def reduced_shape(shape: tuple, axes: tuple[int, ...], keepdims: bool) -> tuple:
    """The shape after reducing ``axes`` of ``shape``."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


class ReducePrototype(Prototype):
    """Reduce*: axes as an attribute before ``axes_input_since``, as an optional input after."""

    axes_input_since: ClassVar[int] = 18
    inputs = (1, 2)

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version < self.axes_input_since:
            return {"axes": None, "keepdims": 1}
        return {"keepdims": 1, "noop_with_empty_axes": 0}

    def check(self, node: Node) -> None:
        if node.version < self.axes_input_since and node.has_input(1):
            raise ModelError(f"{where(node)}: axes is an attribute before opset {self.axes_input_since}, not an input")

    def output_dtype(self, node: Node, dtype: np.dtype | None) -> np.dtype | None:
        return dtype

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        data = ins[0]
        dtype = self.output_dtype(node, data.dtype)
        keepdims = bool(node.attrs["keepdims"])
        if node.version < self.axes_input_since:
            axes = node.attrs["axes"]
        else:
            axes_info = ins[1] if len(ins) > 1 else None
            if axes_info is not None and axes_info.value is None:
                if axes_info.shape is not None and 0 in axes_info.shape:
                    axes = []
                elif keepdims and data.shape is not None:
                    return [Info(dtype, (None,) * len(data.shape))]
                else:
                    return [Info(dtype, None)]
            else:
                axes = None if axes_info is None else axes_info.value
        if data.shape is None:
            return [Info(dtype, None)]
        picked = reduction_axes(node, len(data.shape), axes)
        return [Info(dtype, reduced_shape(data.shape, picked, keepdims))]


# ------------------------------------------------------------------- arg ops
class ArgPrototype(Prototype):
    """ArgMax / ArgMin: int64 indices along one axis."""

    versions = (1, 11, 12, 13)

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version < 12:
            return {"axis": 0, "keepdims": 1}
        return {"axis": 0, "keepdims": 1, "select_last_index": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        data = ins[0]
        if data.shape is None:
            return [Info(np.dtype(np.int64), None)]
        axis = normalize_axis(node, node.attrs["axis"], len(data.shape))
        return [Info(np.dtype(np.int64), reduced_shape(data.shape, (axis,), bool(node.attrs["keepdims"])))]


# ------------------------------------------------------------ softmax family
class SoftmaxPrototype(Prototype):
    """Softmax / LogSoftmax / Hardmax: 2-D coercion before opset 13, one axis after."""

    versions = (1, 11, 13)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"axis": 1 if version < 13 else -1}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is not None:
            if not x.shape:
                raise self.fail(node, "input is a scalar; it needs rank >= 1")
            normalize_axis(node, node.attrs["axis"], len(x.shape))
        return [same_as(x)]


def softmax_axes(node: Node, rank: int) -> tuple[int, ...]:
    """The axes a softmax-like node normalizes over (all trailing ones before opset 13)."""
    axis = normalize_axis(node, node.attrs["axis"], rank)
    if node.version < 13:
        return tuple(range(axis, rank))
    return (axis,)


# ---------------------------------------------------------------- cumulative
class CumulativePrototype(Prototype):
    """CumSum / CumProd: scan along an axis given as an input."""

    inputs = (2, 2)
    attributes = {"exclusive": 0, "reverse": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, axis = ins
        if axis.shape is not None and len(axis.shape) > 1:
            raise self.fail(node, f"axis must be a scalar or a 1-element tensor, got shape {axis.shape}")
        if x.shape is not None and not x.shape:
            raise self.fail(node, "input is a scalar; it needs rank >= 1")
        if axis.value is not None and x.shape is not None:
            normalize_axis(node, int(np.asarray(axis.value).ravel()[0]), len(x.shape))
        return [same_as(x)]


# ------------------------------------------------------------------- windows
def output_datatype(node: Node) -> np.dtype:
    """The numpy dtype of an ``output_datatype`` attribute."""
    dtype = to_numpy(node.attrs["output_datatype"])
    if dtype is None:
        raise UnsupportedTypeError(f"{where(node)}: output_datatype {node.attrs['output_datatype']} is not supported")
    return dtype


def scalar_of(info: Info | None) -> Any:
    """The scalar value of a constant input, or None when unknown."""
    if info is None or info.value is None:
        return None
    return np.asarray(info.value).ravel()[0].item()


class WindowPrototype(Prototype):
    """HannWindow / HammingWindow / BlackmanWindow: a 1-D window of ``size`` samples."""

    versions = (17,)
    attributes = {"output_datatype": 1, "periodic": 1}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        dtype = output_datatype(node)
        size = scalar_of(ins[0])
        if size is not None and size < 0:
            raise self.fail(node, f"size must be >= 0, got {size}")
        return [Info(dtype, (size,))]


# --------------------------------------------------------------------- losses
class LossPrototype(Prototype):
    """NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss: (N, C, d...) scores, (N, d...) targets."""

    inputs = (2, 3)
    attributes = {"ignore_index": None, "reduction": "mean"}

    def check(self, node: Node) -> None:
        if node.attrs["reduction"] not in ("none", "sum", "mean"):
            raise ModelError(f"{where(node)}: reduction '{node.attrs['reduction']}' is not one of none, sum, mean")

    def loss_info(self, node: Node, ins: list[Info | None]) -> Info:
        x, target = ins[0], ins[1]
        if x.shape is not None and len(x.shape) < 2:
            raise self.fail(node, f"input must have rank >= 2 (N, C, ...), got shape {x.shape}")
        if x.shape is not None and target.shape is not None and len(target.shape) != len(x.shape) - 1:
            raise self.fail(node, f"target shape {target.shape} does not match input shape {x.shape}")
        if node.attrs["reduction"] != "none":
            return Info(x.dtype, ())
        if target.shape is not None:
            return Info(x.dtype, target.shape)
        return Info(x.dtype, None if x.shape is None else (x.shape[0],) + tuple(x.shape[2:]))


# ------------------------------------------------------------------ spectral
def dft_axis(node: Node, axis: int, rank: int) -> int:
    """A DFT axis normalized into [0, rank - 2]; the last (complex) axis is invalid."""
    if not -rank <= axis <= rank - 2:
        raise ModelError(f"{where(node)}: DFT axis {axis} is out of range for rank {rank} "
                         "(the last dimension holds real and imaginary parts)")
    return axis + rank if axis < 0 else axis
