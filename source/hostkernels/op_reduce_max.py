"""ReduceMax on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import ReduceKernel, reduce_max


class ReduceMaxKernel(ReduceKernel):
    op_type = "ReduceMax"
    reducer = reduce_max


IMPLEMENTATIONS = (ReduceMaxKernel,)
