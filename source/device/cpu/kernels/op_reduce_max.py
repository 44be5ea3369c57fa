"""ReduceMax on the CPU."""
from __future__ import annotations

from nnhal.device.cpu.kernels._reduce import ReduceKernel, reduce_max


class ReduceMaxKernel(ReduceKernel):
    op_type = "ReduceMax"
    reducer = reduce_max


IMPLEMENTATIONS = (ReduceMaxKernel,)
