"""ReduceSumSquare on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import ReduceKernel, reduce_sum_square


class ReduceSumSquareKernel(ReduceKernel):
    op_type = "ReduceSumSquare"
    reducer = reduce_sum_square


IMPLEMENTATIONS = (ReduceSumSquareKernel,)
