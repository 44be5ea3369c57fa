"""Add: elementwise sum with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class Add(Binary):
    op_type = "Add"
    versions = (7, 13, 14)
