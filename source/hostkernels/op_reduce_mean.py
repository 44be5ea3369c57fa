"""ReduceMean on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import ReduceKernel, reduce_mean


class ReduceMeanKernel(ReduceKernel):
    op_type = "ReduceMean"
    reducer = reduce_mean


IMPLEMENTATIONS = (ReduceMeanKernel,)
