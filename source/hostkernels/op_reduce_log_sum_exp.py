"""ReduceLogSumExp on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import ReduceKernel, reduce_log_sum_exp


class ReduceLogSumExpKernel(ReduceKernel):
    op_type = "ReduceLogSumExp"
    reducer = reduce_log_sum_exp


IMPLEMENTATIONS = (ReduceLogSumExpKernel,)
