"""Softsign: y = x / (1 + |x|)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Softsign(Unary):
    op_type = "Softsign"
    versions = (1, 22)
