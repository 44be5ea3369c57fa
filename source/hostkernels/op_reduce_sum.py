"""ReduceSum on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import ReduceKernel, reduce_sum


class ReduceSumKernel(ReduceKernel):
    op_type = "ReduceSum"
    reducer = reduce_sum


IMPLEMENTATIONS = (ReduceSumKernel,)
