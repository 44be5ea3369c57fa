"""ReduceProd on the CPU."""
from __future__ import annotations

from nnhal.device.cpu.kernels._reduce import ReduceKernel, reduce_prod


class ReduceProdKernel(ReduceKernel):
    op_type = "ReduceProd"
    reducer = reduce_prod


IMPLEMENTATIONS = (ReduceProdKernel,)
