"""Exp: y = e^x."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Exp(Unary):
    op_type = "Exp"
    versions = (1, 6, 13)
