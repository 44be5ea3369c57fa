"""QLinearConv: quantized convolution requantized to the output scale and zero point."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._qrc import CONV_ATTRIBUTES, EIGHT_BIT, check_quant_dtype, conv_shape
from nnhal.operator.base import Info, Prototype


class QLinearConv(Prototype):
    op_type = "QLinearConv"
    versions = (10,)
    inputs = (8, 9)
    attributes = CONV_ATTRIBUTES

    def check(self, node: Node) -> None:
        if node.attrs["group"] < 1:
            raise ModelError(f"{where(node)}: group must be >= 1, got {node.attrs['group']}")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, w, y_zero = ins[0], ins[3], ins[7]
        check_quant_dtype(node, x.dtype, "x", EIGHT_BIT)
        check_quant_dtype(node, w.dtype, "w", EIGHT_BIT)
        check_quant_dtype(node, y_zero.dtype, "y_zero_point", EIGHT_BIT)
        w_scale = ins[4]
        if w_scale.shape is not None and len(w_scale.shape) > 1:
            raise self.fail(node, f"w_scale must be a scalar or 1-D, got shape {w_scale.shape}")
        bias = ins[8] if len(ins) > 8 else None
        if bias is not None and bias.dtype is not None and bias.dtype.kind != "i":
            raise self.fail(node, f"B must be int32, got {bias.dtype}")
        return [Info(y_zero.dtype, conv_shape(node, x, w))]
