"""Acos: y = acos(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Acos(Unary):
    op_type = "Acos"
    versions = (7, 22)
