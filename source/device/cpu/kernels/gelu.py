"""Gelu on the cpu device: the host's float32 exact Gelu (hostkernels/op_gelu.py) in one native pass, and the
tanh approximation (approximate="tanh", what cpu/gelu_tanh.py makes of GPT-2's Mul/Tanh chain) natively."""
from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels._io import planned_io
from nnhal.hostkernels import op_gelu
from nnhal.hostkernels.base import RunFn

_NATIVE_GELU = native.make_act("gelu")
_NATIVE_GELU_TANH = native.make_act("gelu_tanh")
_F32 = np.dtype(np.float32)


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


def gelu_tanh_inplace(y: np.ndarray) -> np.ndarray:
    """The tanh-approximated Gelu of the contiguous float32 ``y`` in place (the native kernels only)."""
    native.activation(y, y, _NATIVE_GELU_TANH, 1)
    return y


class _Bound:
    """Mixin before a Gelu kernel whose float32 run is one native activation pass (``act``): a planned step
    (straight.bind) binds that call on its fixed buffers."""

    act = None

    def prepare(self, node, ins, outs) -> RunFn:
        run = super().prepare(node, ins, outs)    # type: ignore[misc]
        act = self.act

        def bind(inputs, outputs):
            y = outputs[0]
            if not native.available() or y is None or not planned_io(inputs, outputs, y.shape, y.shape, _F32):
                return None
            return partial(native.activation, inputs[0], y, act, 1)

        run.bind = bind
        return run


class GeluNative(_Bound, op_gelu.GeluFast):
    """float32 exact Gelu, the native kernel's one pass (not scored without the native kernels: the host's
    GeluFast, numpy in chunks, runs then)."""

    name = "native"
    act = _NATIVE_GELU

    def score(self, node, ins, outs) -> int:
        s = super().score(node, ins, outs)
        return s + 1 if s > 0 and native.available() else 0

    def into(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if native.available():
            native.activation(x, y, _NATIVE_GELU, 1)
            return y
        return super().into(x, y)


class GeluTanhNative(_Bound, op_gelu.GeluFast):
    """float32 tanh-approximated Gelu, x * sigmoid(2 sqrt(2 / pi) (x + 0.044715 x^3)) (equal to
    x * (1 + tanh(u)) / 2) in one native pass; only with the native kernels (the host's formula runs
    otherwise)."""

    name = "native-tanh"
    act = _NATIVE_GELU_TANH

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if node.attrs.get("approximate", "none") != "tanh" or not native.available():
            return 0
        return 11 if x is not None and x.dtype == np.float32 and x.shape is not None and len(x.shape) > 0 else 0

    def into(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        native.activation(x, y, _NATIVE_GELU_TANH, 1)
        return y


IMPLEMENTATIONS = (GeluNative, GeluTanhNative)
