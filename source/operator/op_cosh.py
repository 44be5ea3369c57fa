"""Cosh: y = cosh(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Cosh(Unary):
    op_type = "Cosh"
    versions = (9, 22)
