"""Hardmax: one-hot of the first maximum along an axis (2-D coerced before opset 13)."""
from __future__ import annotations

from nnhal.operator._reduce import SoftmaxPrototype


class Hardmax(SoftmaxPrototype):
    op_type = "Hardmax"
