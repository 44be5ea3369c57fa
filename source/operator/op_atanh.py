"""Atanh: y = atanh(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Atanh(Unary):
    op_type = "Atanh"
    versions = (9, 22)
