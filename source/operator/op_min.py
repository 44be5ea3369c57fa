"""Min: elementwise minimum (NaN propagates) of one or more tensors with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Variadic


class Min(Variadic):
    op_type = "Min"
    versions = (6, 8, 12, 13)
