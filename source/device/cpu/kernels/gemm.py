"""Gemm on the cpu device: the host's Gemm (hostkernels/op_gemm.py) with its product on the pool and the
native gates for a fused activation; a float32 Gemm of a constant B and a constant bias row (a Linear layer:
attention's projections, a classifier) as the MatMul's native GEMM, B packed once and the bias added by
each thread to its rows, or GEMVs for a few rows (kernels/matmul.py, gemm_first)."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels._gates import GATES
from nnhal.device.cpu.kernels._pooled import Pooled
from nnhal.device.cpu.kernels.matmul import gemm_first
from nnhal.hostkernels.base import RunFn
from nnhal.hostkernels.fused import activation_of
from nnhal.hostkernels.op_gemm import GemmKernel

_F32 = np.dtype(np.float32)


class GemmPooled(Pooled, GemmKernel):
    gates = GATES


class GemmNative(GemmPooled):
    """float32 act(A @ alpha B + beta c) for a constant B and a constant c of the output's width, A not
    transposed: alpha and beta folded at prepare, a fused activation in the GEMM's epilogue; anything else
    runs the pooled host computation."""

    name = "native"

    def score(self, node, ins, outs) -> int:
        s = super().score(node, ins, outs)
        return s + 1 if s > 0 and native.available() and _linear(node, ins, outs) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        run = super().prepare(node, ins, outs)
        linear = _linear(node, ins, outs)
        if linear is None:
            return run
        w, bias = linear
        # NOTE: a fused activation runs in the native GEMM's epilogue; ``run`` (the pooled host Gemm, which
        # applies it itself) only when the native GEMM cannot take the operands
        return gemm_first(run, w, bias, tuple(outs[0].shape), activation_of(node), True)


def _linear(node, ins, outs) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(B with alpha folded, C with beta folded as a contiguous row or None) of a Gemm the native GEMM runs,
    else None."""
    attrs = node.attrs
    if attrs["transA"] or len(ins) < 2 or ins[0] is None or ins[1] is None or ins[0].dtype != _F32 \
            or outs[0].dtype != _F32 or outs[0].shape is None or len(outs[0].shape) != 2 \
            or not isinstance(outs[0].shape[-1], int):
        return None
    b = ins[1].value
    if b is None or b.dtype != _F32 or b.ndim != 2:
        return None
    width = outs[0].shape[-1]
    alpha, beta = float(attrs["alpha"]), float(attrs["beta"])
    w = b.T if attrs["transB"] else b
    if alpha != 1:
        w = w * np.float32(alpha)
    if not (w.flags.c_contiguous or w.flags.f_contiguous):
        w = np.ascontiguousarray(w)
    c = ins[2] if len(ins) > 2 and beta != 0 else None
    if c is None:
        return w, None
    if c.value is None or c.value.dtype != _F32 or c.value.size != width or c.value.shape[-1] != width:
        return None
    bias = c.value.reshape(-1) * np.float32(beta) if beta != 1 else c.value.reshape(-1)
    return w, np.ascontiguousarray(bias)


IMPLEMENTATIONS = (GemmPooled, GemmNative)
