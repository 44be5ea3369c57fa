"""Mish: y = x * tanh(softplus(x))."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Mish(Unary):
    op_type = "Mish"
    versions = (18, 22)
