"""QLinearSoftmax (com.microsoft): softmax of the dequantized input, requantized."""
from __future__ import annotations

from nnhal.errors import UnsupportedTypeError, where
from nnhal.graph.node import Node
from nnhal.operator._msq import EIGHT_BIT
from nnhal.operator.base import REQUIRED, Info, Prototype


class QLinearSoftmax(Prototype):
    op_type = "QLinearSoftmax"
    domain = "com.microsoft"
    versions = (1,)
    inputs = (4, 5)
    attributes = {"axis": -1, "opset": REQUIRED}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if str(x.dtype) not in EIGHT_BIT:
            raise UnsupportedTypeError(f"{where(node)}: input {x.dtype}; nnhal runs uint8 or int8")
        return [Info(x.dtype, x.shape)]
