"""ReduceMean: the arithmetic mean over the given axes."""
from __future__ import annotations

from nnhal.operator._reduce import ReducePrototype


class ReduceMean(ReducePrototype):
    op_type = "ReduceMean"
    versions = (1, 11, 13, 18)
    axes_input_since = 18
