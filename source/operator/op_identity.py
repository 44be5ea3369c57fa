"""Identity: y = x (the output is a view of the input)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Identity(Unary):
    op_type = "Identity"
    versions = (1, 13, 14, 16, 19, 21, 23, 24, 25)
    kinds = None
