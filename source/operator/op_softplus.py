"""Softplus: y = ln(1 + e^x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Softplus(Unary):
    op_type = "Softplus"
    versions = (1, 22)
