"""Ceil: y = ceil(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Ceil(Unary):
    op_type = "Ceil"
    versions = (1, 6, 13)
