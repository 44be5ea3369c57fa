"""ConvInteger: int32 convolution of zero-point-shifted 8-bit integers."""
from __future__ import annotations

import numpy as np

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._qrc import CONV_ATTRIBUTES, EIGHT_BIT, check_quant_dtype, conv_shape
from nnhal.operator.base import Info, Prototype


class ConvInteger(Prototype):
    op_type = "ConvInteger"
    versions = (10,)
    inputs = (2, 4)
    attributes = CONV_ATTRIBUTES

    def check(self, node: Node) -> None:
        if node.attrs["group"] < 1:
            raise ModelError(f"{where(node)}: group must be >= 1, got {node.attrs['group']}")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, w = ins[0], ins[1]
        check_quant_dtype(node, x.dtype, "x", EIGHT_BIT)
        check_quant_dtype(node, w.dtype, "w", EIGHT_BIT)
        return [Info(np.dtype(np.int32), conv_shape(node, x, w))]
