"""ReduceProd on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import ReduceKernel, reduce_prod


class ReduceProdKernel(ReduceKernel):
    op_type = "ReduceProd"
    reducer = reduce_prod


IMPLEMENTATIONS = (ReduceProdKernel,)
