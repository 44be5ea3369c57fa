"""ReduceProd: the product over the given axes."""
from __future__ import annotations

from nnhal.operator._reduce import ReducePrototype


class ReduceProd(ReducePrototype):
    op_type = "ReduceProd"
    versions = (1, 11, 13, 18)
    axes_input_since = 18
