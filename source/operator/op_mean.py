"""Mean: elementwise mean of one or more tensors with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Variadic


class Mean(Variadic):
    op_type = "Mean"
    versions = (6, 8, 13)
    kinds = "f"
