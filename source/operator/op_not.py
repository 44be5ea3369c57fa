"""Not: logical negation of a bool tensor."""
from __future__ import annotations

from nnhal.operator._unary import BOOL, Unary


class Not(Unary):
    op_type = "Not"
    versions = (1,)
    kinds = BOOL
