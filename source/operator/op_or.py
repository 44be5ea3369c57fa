"""Or: elementwise logical or of two bool tensors with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class Or(Binary):
    op_type = "Or"
    versions = (7,)
    kinds = "b"
    boolean = True
