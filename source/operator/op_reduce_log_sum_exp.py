"""ReduceLogSumExp: the log of the sum of exponentials over the given axes."""
from __future__ import annotations

from nnhal.operator._reduce import ReducePrototype


class ReduceLogSumExp(ReducePrototype):
    op_type = "ReduceLogSumExp"
    versions = (1, 11, 13, 18, 28)
    axes_input_since = 18
