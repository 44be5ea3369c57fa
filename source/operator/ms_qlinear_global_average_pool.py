"""QLinearGlobalAveragePool (com.microsoft): quantized mean over the spatial axes."""
from __future__ import annotations

from nnhal.errors import UnsupportedTypeError, where
from nnhal.graph.node import Node
from nnhal.operator._msq import EIGHT_BIT
from nnhal.operator.base import Info, Prototype


class QLinearGlobalAveragePool(Prototype):
    op_type = "QLinearGlobalAveragePool"
    domain = "com.microsoft"
    versions = (1,)
    inputs = (5, 5)
    attributes = {"channels_last": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if str(x.dtype) not in EIGHT_BIT:
            raise UnsupportedTypeError(f"{where(node)}: input {x.dtype}; nnhal runs uint8 or int8")
        if x.shape is None:
            return [Info(x.dtype, None)]
        if node.attrs["channels_last"]:
            return [Info(x.dtype, (x.shape[0],) + (1,) * (len(x.shape) - 2) + (x.shape[-1],))]
        return [Info(x.dtype, tuple(x.shape[:2]) + (1,) * (len(x.shape) - 2))]
