"""CodeTable (ai.nnhal): Y = Table[code of X], element-wise. X uint8 or int8 (any shape), Table [256] (any
type) indexed by X's byte (the value of uint8; the two's complement bit pattern of int8), or [C, 256]: one
table per channel of X's last axis (C its size), Y[..., c] = Table[c, code of X[..., c]]. Y has X's shape and
Table's type.

The cpu device's quantized lowering writes it for a chain of element-wise ops that reads one 8-bit tensor and
constants only and writes an 8-bit tensor (a SiLU as DequantizeLinear -> Sigmoid -> QuantizeLinear ->
QLinearMul): the chain's output for each of the 256 codes, evaluated once (optimizer/qtables.py); per channel
when the chain adds or multiplies a constant along the last axis (a bias Add between DequantizeLinear and
QuantizeLinear in a static QDQ model). Attribute ``affine`` (optional, floats): for such a bias chain, its
x_scale, x_zero, y_scale, y_zero and the C bias values, Table[c, q] = QuantizeLinear(DequantizeLinear(q, x_scale,
x_zero) + bias[c], y_scale, y_zero); a description a device may compute from instead of the table, never a
different definition (the table is the result).
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
    attributes = {"affine": ()}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, table = ins[0], ins[1]
        if x.dtype is not None and x.dtype not in (np.dtype(np.uint8), np.dtype(np.int8)):
            raise self.fail(node, f"X must be uint8 or int8, got {x.dtype}")
        shape = None if table.shape is None else tuple(table.shape)
        channels = None if x.shape is None or not len(x.shape) else x.shape[-1]
        if shape is not None and shape != (256,) and not (len(shape) == 2 and shape[1] == 256 and (
                channels is None or not isinstance(channels, int) or shape[0] == channels)):
            raise self.fail(node, f"Table must have shape [256] or [C, 256] with C = X's last dimension "
                                  f"({channels}), got {list(shape)}")
        return [Info(table.dtype, x.shape)]
