"""Tanh: y = tanh(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Tanh(Unary):
    op_type = "Tanh"
    versions = (1, 6, 13)
