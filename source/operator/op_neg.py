"""Neg: y = -x."""
from __future__ import annotations

from nnhal.operator._unary import SIGNED, Unary


class Neg(Unary):
    op_type = "Neg"
    versions = (1, 6, 13)
    kinds = SIGNED
