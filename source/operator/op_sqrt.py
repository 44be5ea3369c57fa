"""Sqrt: y = sqrt(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Sqrt(Unary):
    op_type = "Sqrt"
    versions = (1, 6, 13)
