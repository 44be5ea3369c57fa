"""ReduceL1: the sum of absolute values over the given axes."""
from __future__ import annotations

from nnhal.operator._reduce import ReducePrototype


class ReduceL1(ReducePrototype):
    op_type = "ReduceL1"
    versions = (1, 11, 13, 18)
    axes_input_since = 18
