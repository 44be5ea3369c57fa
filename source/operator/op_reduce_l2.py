"""ReduceL2: the Euclidean norm over the given axes."""
from __future__ import annotations

from nnhal.operator._reduce import ReducePrototype


class ReduceL2(ReducePrototype):
    op_type = "ReduceL2"
    versions = (1, 11, 13, 18)
    axes_input_since = 18
