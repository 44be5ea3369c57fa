"""Reciprocal: y = 1 / x."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Reciprocal(Unary):
    op_type = "Reciprocal"
    versions = (1, 6, 13)
