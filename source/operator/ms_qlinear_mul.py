"""QLinearMul (com.microsoft): quantized elementwise mul with broadcasting."""
from __future__ import annotations

from nnhal.operator._msq import QLinearBinary


class QLinearMul(QLinearBinary):
    op_type = "QLinearMul"
