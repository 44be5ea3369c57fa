"""BitwiseOr: elementwise bitwise or of two integer tensors with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class BitwiseOr(Binary):
    op_type = "BitwiseOr"
    versions = (18,)
    kinds = "iu"
