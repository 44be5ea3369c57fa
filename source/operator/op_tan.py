"""Tan: y = tan(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Tan(Unary):
    op_type = "Tan"
    versions = (7, 22)
