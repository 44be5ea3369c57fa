"""CumSum: cumulative sum along an axis (exclusive and reverse variants)."""
from __future__ import annotations

from nnhal.operator._reduce import CumulativePrototype


class CumSum(CumulativePrototype):
    op_type = "CumSum"
    versions = (11, 14)
