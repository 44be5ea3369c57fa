"""Div: elementwise quotient (truncated toward zero for integers) with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class Div(Binary):
    op_type = "Div"
    versions = (7, 13, 14)
