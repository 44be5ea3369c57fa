"""Less: elementwise a < b (bool) with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class Less(Binary):
    op_type = "Less"
    versions = (7, 9, 13)
    boolean = True
