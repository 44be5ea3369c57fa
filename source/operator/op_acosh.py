"""Acosh: y = acosh(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Acosh(Unary):
    op_type = "Acosh"
    versions = (9, 22)
