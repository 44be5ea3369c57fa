"""Sub: elementwise difference with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class Sub(Binary):
    op_type = "Sub"
    versions = (7, 13, 14)
