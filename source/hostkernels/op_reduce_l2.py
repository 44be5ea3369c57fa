"""ReduceL2 on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import ReduceKernel, reduce_l2


class ReduceL2Kernel(ReduceKernel):
    op_type = "ReduceL2"
    reducer = reduce_l2


IMPLEMENTATIONS = (ReduceL2Kernel,)
