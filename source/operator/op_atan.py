"""Atan: y = atan(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Atan(Unary):
    op_type = "Atan"
    versions = (7, 22)
