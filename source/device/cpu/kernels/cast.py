"""Cast between float32 and float16 on the cpu device, and a float32 tensor rounded through float16 (fp16
storage's boundary rounding, castfuse.fuse_half_round_trips), by the native F16C conversion (kernels.c
nn_cast_half); the numpy reference (hostkernels/op_cast.py) takes every other Cast.

numpy's own float32 -> float16 conversion has no SIMD path: 12 ns an element on an AVX2 EPYC, where the
native one takes under 1. Both round to nearest even, saturate to inf and keep NaN: bit-equal results.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels._io import contiguous_io
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.op_cast import CastKernel
from nnhal.operator.base import Info

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def _static(info: Info | None) -> bool:
    return info is not None and info.static and info.shape is not None


def _half_run(shape: tuple, dtype: np.dtype) -> RunFn:
    """The run function writing ``cast_half(x)`` into the output (or a fresh array of ``shape``/``dtype``);
    a non-contiguous input is made contiguous first."""
    cast = native.cast_half

    def run(inputs, outputs):
        x, out = contiguous_io(inputs, outputs, shape, dtype)
        cast(x, out)
        return (out,)

    return run


class CastHalf(CastKernel):
    """Cast float32 -> float16 or float16 -> float32 of a static shape, by the native conversion."""

    name = "half"

    def score(self, node, ins, outs) -> int:
        if not native.available() or not _static(ins[0]) or not outs or outs[0].dtype is None:
            return 0
        pair = (np.dtype(ins[0].dtype), np.dtype(outs[0].dtype))
        return 5 if pair in ((F32, F16), (F16, F32)) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        return _half_run(tuple(ins[0].shape), np.dtype(outs[0].dtype))


class RoundHalf(Kernel):
    """A Cast to float16 and the Cast back to float32 after it, as one step (castfuse.fuse_half_round_trips):
    the float32 tensor rounded to the nearest float16 value, in place where the planner allows. Not in the
    selection table: the fusion that forms the pair chooses it."""

    op_type = "Cast"
    name = "round-half"
    inplace = {0: 0}

    @staticmethod
    def takes(ins: list[Info | None]) -> bool:
        """The native kernels are there and the input is a static float32 tensor."""
        return native.available() and _static(ins[0]) and np.dtype(ins[0].dtype) == F32

    def prepare(self, node, ins, outs) -> RunFn:
        return _half_run(tuple(ins[0].shape), F32)


IMPLEMENTATIONS = (CastHalf,)
