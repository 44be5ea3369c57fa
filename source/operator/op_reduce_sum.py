"""ReduceSum: the sum over the given axes."""
from __future__ import annotations

from nnhal.operator._reduce import ReducePrototype


class ReduceSum(ReducePrototype):
    op_type = "ReduceSum"
    versions = (1, 11, 13)
    axes_input_since = 13
