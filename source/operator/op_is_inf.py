"""IsInf: y = whether x is +inf and/or -inf, as the attributes select (bool)."""
from __future__ import annotations

from nnhal.operator._unary import Predicate


class IsInf(Predicate):
    op_type = "IsInf"
    versions = (10, 20)
    attributes = {"detect_negative": 1, "detect_positive": 1}
