"""ReduceLogSum on the CPU."""
from __future__ import annotations

from nnhal.device.cpu.kernels._reduce import ReduceKernel, reduce_log_sum


class ReduceLogSumKernel(ReduceKernel):
    op_type = "ReduceLogSum"
    reducer = reduce_log_sum


IMPLEMENTATIONS = (ReduceLogSumKernel,)
