"""Cos: y = cos(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Cos(Unary):
    op_type = "Cos"
    versions = (7, 22)
