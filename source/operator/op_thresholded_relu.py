"""ThresholdedRelu: y = x for x > alpha, 0 otherwise."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class ThresholdedRelu(Unary):
    op_type = "ThresholdedRelu"
    versions = (10, 22)
    attributes = {"alpha": 1.0}
