"""Max: elementwise maximum (NaN propagates) of one or more tensors with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Variadic


class Max(Variadic):
    op_type = "Max"
    versions = (6, 8, 12, 13)
