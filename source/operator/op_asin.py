"""Asin: y = asin(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Asin(Unary):
    op_type = "Asin"
    versions = (7, 22)
