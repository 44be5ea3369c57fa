"""And: elementwise logical and of two bool tensors with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class And(Binary):
    op_type = "And"
    versions = (7,)
    kinds = "b"
    boolean = True
