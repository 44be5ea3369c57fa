"""Tensors of the nnhal IR: shape, dtype, kind, layout and quantization."""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

Shape = tuple  # tuple[int | None, ...]; None marks a dimension unknown until run time


class TensorKind(enum.Enum):
    INPUT = "input"        # fed by the user for each run
    CONSTANT = "constant"  # initializer, Constant node or folded value
    VARIABLE = "variable"  # produced by a node


@dataclass(frozen=True)
class Quantization:
    """Affine quantization: real = scale * (q - zero_point).

    ``axis`` is None for per-tensor parameters, else the channel axis along
    which ``scale`` and ``zero_point`` vary.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None

    @property
    def per_channel(self) -> bool:
        return self.axis is not None


@dataclass
class Tensor:
    """One value of the graph.

    ``shape`` is None while unknown; individual dims are None when they are
    only known at run time. ``value`` holds the data of constants.
    """

    name: str
    dtype: np.dtype | None = None
    shape: Shape | None = None
    kind: TensorKind = TensorKind.VARIABLE
    value: np.ndarray | None = None
    layout: str | None = None          # "NCHW", "NHWC" or None when it does not apply
    quant: Quantization | None = None

    @property
    def is_constant(self) -> bool:
        return self.kind is TensorKind.CONSTANT

    @property
    def static(self) -> bool:
        """True when dtype and every dimension are known before the run."""
        return self.dtype is not None and self.shape is not None and all(d is not None for d in self.shape)

    @property
    def nbytes(self) -> int | None:
        if not self.static:
            return None
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def describe(self) -> str:
        dims = "?" if self.shape is None else "x".join("?" if d is None else str(d) for d in self.shape) or "scalar"
        dt = "?" if self.dtype is None else str(self.dtype)
        return f"{self.name}: {dt}[{dims}]"


def constant(name: str, value: np.ndarray) -> Tensor:
    """A constant tensor holding ``value``."""
    value = np.asarray(value)
    return Tensor(name=name, dtype=value.dtype, shape=tuple(value.shape), kind=TensorKind.CONSTANT, value=value)
