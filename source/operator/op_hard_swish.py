"""HardSwish: y = x * max(0, min(1, x / 6 + 1 / 2))."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class HardSwish(Unary):
    op_type = "HardSwish"
    versions = (14, 22)
