"""GreaterOrEqual: elementwise a >= b (bool) with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class GreaterOrEqual(Binary):
    op_type = "GreaterOrEqual"
    versions = (12, 16)
    boolean = True
