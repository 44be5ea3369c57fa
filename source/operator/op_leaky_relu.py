"""LeakyRelu: y = x for x >= 0, alpha * x otherwise."""
from __future__ import annotations

from nnhal.operator._unary import Unary


class LeakyRelu(Unary):
    op_type = "LeakyRelu"
    versions = (1, 6, 16)
    attributes = {"alpha": 0.009999999776482582}
