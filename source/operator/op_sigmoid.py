"""Sigmoid: y = 1 / (1 + e^-x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Sigmoid(Unary):
    op_type = "Sigmoid"
    versions = (1, 6, 13)
