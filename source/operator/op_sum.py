"""Sum: elementwise sum of one or more tensors with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Variadic


class Sum(Variadic):
    op_type = "Sum"
    versions = (6, 8, 13)
