"""Gelu on the CPU: exact (erf in float64) or the tanh approximation; fast: float32 exact Gelu in numpy
(also what the CPU plan fuses torch.onnx's Div/Erf/Add/Mul/Mul chain into; the cpu device's native one
is device/cpu/kernels/gelu.py)."""
from __future__ import annotations

import math

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._unary import FormulaKernel, erf
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.op_erf import erf_chunk

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class GeluKernel(FormulaKernel):
    op_type = "Gelu"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        if node.attrs["approximate"] == "tanh":
            inner = x * x
            inner *= 0.044715
            inner += 1
            inner *= x
            inner *= _SQRT_2_OVER_PI
            t = np.tanh(inner, out=inner)
        else:
            t = erf(x * (1.0 / math.sqrt(2.0)))
        t += 1
        t *= x
        t *= 0.5
        return t


class GeluFast(Kernel):
    """float32 exact Gelu, x * (1 + erf(x / sqrt 2)) / 2, as torch.onnx spells it (x / sqrt2 in float32,
    then erf, + 1, * x, * 0.5, the same float32 steps as the separate fast kernels): the fast Erf's
    polynomial on cache-sized chunks. One thread: splitting the chunks over the session's threads measured
    slower (OpenBLAS's idle workers spin against the pool thread)."""

    op_type = "Gelu"
    name = "fast"
    inplace = {0: 0}

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if node.attrs.get("approximate", "none") != "none":
            return 0
        return 10 if x is not None and x.dtype == np.float32 and x.shape is not None and len(x.shape) > 0 else 0

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            x = inputs[0]
            given = outputs[0]
            out = given if given is not None and given.flags.c_contiguous else np.empty(x.shape, np.float32)
            if not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            self.into(x, out)   # out may be x (in place)
            if given is not None and given is not out:
                np.copyto(given, out)
                out = given
            return (out,)

        return run

    def into(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The Gelu of the contiguous ``x`` into the contiguous ``y`` (may be x); a device may replace it."""
        return _gelu_into(x, y)


def gelu_chunk(x: np.ndarray, out: np.ndarray, tmp: np.ndarray, xc: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Exact float32 Gelu of the 1-d ``x`` into ``out`` (may alias x) as torch.onnx's Div/Erf/Add/Mul/Mul
    computes it; tmp, xc and t are scratch of x's size."""
    np.divide(x, _SQRT2, out=t)
    erf_chunk(t, tmp, xc, t)
    t += _ONE
    np.multiply(x, t, out=t)
    return np.multiply(t, _HALF, out=out)


def _gelu_into(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact float32 Gelu of the contiguous ``x`` into the contiguous ``y`` (may be x), in cache-sized chunks."""
    flat_x, flat_y = x.reshape(-1), y.reshape(-1)
    n = flat_x.size
    m = min(n, CHUNK)
    tmp, xc, t = np.empty(m, np.float32), np.empty(m, np.float32), np.empty(m, np.float32)
    for i in range(0, n, CHUNK):
        j = min(n, i + CHUNK)
        gelu_chunk(flat_x[i:j], flat_y[i:j], tmp[:j - i], xc[:j - i], t[:j - i])
    return y


def gelu_inplace(y: np.ndarray) -> np.ndarray:
    """Exact float32 Gelu of the contiguous ``y`` in place, in cache-sized chunks."""
    return _gelu_into(y, y)


CHUNK = 1 << 16
_SQRT2 = np.float32(1.4142135381698608)
_ONE = np.float32(1.0)
_HALF = np.float32(0.5)

IMPLEMENTATIONS = (GeluKernel, GeluFast)
