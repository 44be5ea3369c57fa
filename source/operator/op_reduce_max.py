"""ReduceMax: the largest element over the given axes."""
from __future__ import annotations

from nnhal.operator._reduce import ReducePrototype


class ReduceMax(ReducePrototype):
    op_type = "ReduceMax"
    versions = (1, 11, 12, 13, 18, 20)
    axes_input_since = 18
