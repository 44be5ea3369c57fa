"""CodeTable (ai.nnhal): Y = Table[code of X], element-wise. X uint8 or int8 (any shape), Table [256] (any
type) indexed by X's byte (the value of uint8; the two's complement bit pattern of int8). Y has X's shape and
Table's type.

The cpu device's quantized lowering writes it for a chain of element-wise ops that reads one 8-bit tensor and
constants only and writes an 8-bit tensor (a SiLU as DequantizeLinear -> Sigmoid -> QuantizeLinear ->
QLinearMul): the chain's output for each of the 256 codes, evaluated once (optimizer/qtables.py).
"""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


class CodeTable(Prototype):
    op_type = "CodeTable"
    domain = "ai.nnhal"
    versions = (1,)
    inputs = (2, 2)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, table = ins[0], ins[1]
        if x.dtype is not None and x.dtype not in (np.dtype(np.uint8), np.dtype(np.int8)):
            raise self.fail(node, f"X must be uint8 or int8, got {x.dtype}")
        if table.shape is not None and tuple(table.shape) != (256,):
            raise self.fail(node, f"Table must have shape [256], got {list(table.shape)}")
        return [Info(table.dtype, x.shape)]
