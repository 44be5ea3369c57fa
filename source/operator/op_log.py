"""Log: y = ln(x)."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class Log(Unary):
    op_type = "Log"
    versions = (1, 6, 13)
