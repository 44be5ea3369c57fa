"""Erf: the Gauss error function, elementwise."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Erf(Unary):
    op_type = "Erf"
    versions = (9, 13)
