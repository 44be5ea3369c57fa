"""ReduceSumSquare: the sum of squares over the given axes."""
from __future__ import annotations

from nnhal.operator._reduce import ReducePrototype


class ReduceSumSquare(ReducePrototype):
    op_type = "ReduceSumSquare"
    versions = (1, 11, 13, 18)
    axes_input_since = 18
