"""Asinh: y = asinh(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Asinh(Unary):
    op_type = "Asinh"
    versions = (9, 22)
