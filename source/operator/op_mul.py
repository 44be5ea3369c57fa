"""Mul: elementwise product with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class Mul(Binary):
    op_type = "Mul"
    versions = (7, 13, 14)
