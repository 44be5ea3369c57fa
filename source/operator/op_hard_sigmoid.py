"""HardSigmoid: y = max(0, min(1, alpha * x + beta))."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class HardSigmoid(Unary):
    op_type = "HardSigmoid"
    versions = (1, 6, 22)
    attributes = {"alpha": 0.20000000298023224, "beta": 0.5}
