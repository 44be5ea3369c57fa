"""BitwiseAnd: elementwise bitwise and of two integer tensors with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class BitwiseAnd(Binary):
    op_type = "BitwiseAnd"
    versions = (18,)
    kinds = "iu"
