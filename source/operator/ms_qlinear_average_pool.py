"""QLinearAveragePool (com.microsoft): AveragePool of the dequantized input, requantized."""
from __future__ import annotations

from nnhal.errors import UnsupportedTypeError, where
from nnhal.graph.node import Node
from nnhal.operator._msq import EIGHT_BIT
from nnhal.operator.base import Info, Prototype
from nnhal.operator.table import get_prototype


class QLinearAveragePool(Prototype):
    op_type = "QLinearAveragePool"
    domain = "com.microsoft"
    versions = (1,)
    inputs = (4, 5)

    def attributes_for(self, version: int) -> dict:
        pool = get_prototype("", "AveragePool")
        return {**pool.attributes_for(pool.versions[-1]), "channels_last": 0}

    def check(self, node: Node) -> None:
        if node.attrs["channels_last"]:
            raise UnsupportedTypeError(f"{where(node)}: channels_last=1 is not supported")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if str(x.dtype) not in EIGHT_BIT:
            raise UnsupportedTypeError(f"{where(node)}: input {x.dtype}; nnhal runs uint8 or int8")
        pool = get_prototype("", "AveragePool")
        out = pool.infer(node, [Info(x.dtype, x.shape)])[0]
        return [Info(x.dtype, out.shape)]
