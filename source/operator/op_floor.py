"""Floor: y = floor(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Floor(Unary):
    op_type = "Floor"
    versions = (1, 6, 13)
