"""ReduceMin on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import ReduceKernel, reduce_min


class ReduceMinKernel(ReduceKernel):
    op_type = "ReduceMin"
    reducer = reduce_min


IMPLEMENTATIONS = (ReduceMinKernel,)
