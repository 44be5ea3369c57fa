"""Shared inference of the com.microsoft quantized operators (QLinearAdd, QLinearMul, ...)."""
from __future__ import annotations

from nnhal.errors import UnsupportedTypeError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, broadcast

EIGHT_BIT = ("uint8", "int8")


class QLinearBinary(Prototype):
    """C = quantize(dequantize(A) op dequantize(B)) with C's parameters; numpy broadcasting."""

    domain = "com.microsoft"
    versions = (1,)
    inputs = (7, 8)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        a, b = ins[0], ins[3]
        if str(a.dtype) not in EIGHT_BIT or a.dtype != b.dtype:
            raise UnsupportedTypeError(f"{where(node)}: inputs {a.dtype} and {b.dtype}; nnhal runs uint8 or int8 pairs")
        return [Info(a.dtype, broadcast(node, a.shape, b.shape))]
