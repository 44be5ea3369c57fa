"""Swish: y = x * sigmoid(alpha * x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Swish(Unary):
    op_type = "Swish"
    versions = (24,)
    attributes = {"alpha": 1.0}
