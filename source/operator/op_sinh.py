"""Sinh: y = sinh(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Sinh(Unary):
    op_type = "Sinh"
    versions = (9, 22)
