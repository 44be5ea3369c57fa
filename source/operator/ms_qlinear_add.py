"""QLinearAdd (com.microsoft): quantized elementwise add with broadcasting."""
from __future__ import annotations

from nnhal.operator._msq import QLinearBinary


class QLinearAdd(QLinearBinary):
    op_type = "QLinearAdd"
