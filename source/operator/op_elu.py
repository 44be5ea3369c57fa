"""Elu: y = x for x >= 0, alpha * (e^x - 1) otherwise."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Elu(Unary):
    op_type = "Elu"
    versions = (1, 6, 22)
    attributes = {"alpha": 1.0}
