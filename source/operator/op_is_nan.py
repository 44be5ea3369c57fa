"""IsNaN: y = whether x is NaN (bool)."""
from __future__ import annotations

from nnhal.operator._unary import Predicate


class IsNaN(Predicate):
    op_type = "IsNaN"
    versions = (9, 13, 20)
