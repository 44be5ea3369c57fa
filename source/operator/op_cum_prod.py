"""CumProd: cumulative product along an axis (exclusive and reverse variants)."""
from __future__ import annotations

from nnhal.operator._reduce import CumulativePrototype


class CumProd(CumulativePrototype):
    op_type = "CumProd"
    versions = (26,)
