"""BitwiseXor: elementwise bitwise xor of two integer tensors with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class BitwiseXor(Binary):
    op_type = "BitwiseXor"
    versions = (18,)
    kinds = "iu"
