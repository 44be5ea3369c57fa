"""Gelu on the cpu device: the host's float32 exact Gelu (hostkernels/op_gelu.py) in one native pass."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native
from nnhal.hostkernels import op_gelu

_NATIVE_GELU = native.make_act("gelu")


def gelu_chunk(x: np.ndarray, out: np.ndarray, tmp: np.ndarray, xc: np.ndarray, t: np.ndarray) -> np.ndarray:
    """op_gelu.gelu_chunk, by the native kernel in one pass when it is built."""
    if native.available():
        native.activation(x, out, _NATIVE_GELU, 1)
        return out
    return op_gelu.gelu_chunk(x, out, tmp, xc, t)


def gelu_inplace(y: np.ndarray) -> np.ndarray:
    """op_gelu.gelu_inplace, by the native kernel in one pass when it is built."""
    if native.available():
        native.activation(y, y, _NATIVE_GELU, 1)
        return y
    return op_gelu.gelu_inplace(y)


class GeluNative(op_gelu.GeluFast):
    """float32 exact Gelu, the native kernel's one pass (not scored without the native kernels: the host's
    GeluFast, numpy in chunks, runs then)."""

    name = "native"

    def score(self, node, ins, outs) -> int:
        s = super().score(node, ins, outs)
        return s + 1 if s > 0 and native.available() else 0

    def into(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if native.available():
            native.activation(x, y, _NATIVE_GELU, 1)
            return y
        return super().into(x, y)


IMPLEMENTATIONS = (GeluNative,)
