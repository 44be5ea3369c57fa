"""Abs: y = |x|."""
from __future__ import annotations

from nnhal.operator._unary import NUMERIC, Unary


class Abs(Unary):
    op_type = "Abs"
    versions = (1, 6, 13)
    kinds = NUMERIC
