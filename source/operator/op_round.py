"""Round: y = x rounded to the nearest integer, halves to even."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Round(Unary):
    op_type = "Round"
    versions = (11, 22)
