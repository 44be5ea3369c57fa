"""ReduceLogSum on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import ReduceKernel, reduce_log_sum


class ReduceLogSumKernel(ReduceKernel):
    op_type = "ReduceLogSum"
    reducer = reduce_log_sum


IMPLEMENTATIONS = (ReduceLogSumKernel,)
