"""Sign: y = -1, 0 or 1 by the sign of x (NaN stays NaN)."""
from __future__ import annotations

from nnhal.operator._unary import NUMERIC, Unary


class Sign(Unary):
    op_type = "Sign"
    versions = (9, 13)
    kinds = NUMERIC
