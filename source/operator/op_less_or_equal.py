"""LessOrEqual: elementwise a <= b (bool) with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class LessOrEqual(Binary):
    op_type = "LessOrEqual"
    versions = (12, 16)
    boolean = True
