"""Greater: elementwise a > b (bool) with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class Greater(Binary):
    op_type = "Greater"
    versions = (7, 9, 13)
    boolean = True
