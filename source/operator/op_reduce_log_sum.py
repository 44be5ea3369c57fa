"""ReduceLogSum: the log of the sum over the given axes."""
from __future__ import annotations

from nnhal.operator._reduce import ReducePrototype


class ReduceLogSum(ReducePrototype):
    op_type = "ReduceLogSum"
    versions = (1, 11, 13, 18, 28)
    axes_input_since = 18
