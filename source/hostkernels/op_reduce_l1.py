"""ReduceL1 on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import ReduceKernel, reduce_l1


class ReduceL1Kernel(ReduceKernel):
    op_type = "ReduceL1"
    reducer = reduce_l1


IMPLEMENTATIONS = (ReduceL1Kernel,)
