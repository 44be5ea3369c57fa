"""BitwiseNot: bitwise complement of an integer tensor."""
from __future__ import annotations

from nnhal.operator._unary import INTEGER, Unary


class BitwiseNot(Unary):
    op_type = "BitwiseNot"
    versions = (18,)
    kinds = INTEGER
