"""Gemm on the cpu device: the host's Gemm (hostkernels/op_gemm.py) with its product on the pool and the
native gates for a fused activation."""
from __future__ import annotations

from nnhal.device.cpu.kernels._gates import GATES
from nnhal.device.cpu.kernels._pooled import Pooled
from nnhal.hostkernels.op_gemm import GemmKernel


class GemmPooled(Pooled, GemmKernel):
    gates = GATES


IMPLEMENTATIONS = (GemmPooled,)
