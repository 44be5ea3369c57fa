"""Sin: y = sin(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Sin(Unary):
    op_type = "Sin"
    versions = (7, 22)
