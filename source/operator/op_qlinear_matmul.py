"""QLinearMatMul: quantized matrix product requantized to the output scale and zero point."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._qrc import EIGHT_BIT, check_quant_dtype, matmul_shape
from nnhal.operator.base import Info, Prototype


class QLinearMatMul(Prototype):
    op_type = "QLinearMatMul"
    versions = (10, 21)
    inputs = (8, 8)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        a, b, y_zero = ins[0], ins[3], ins[7]
        check_quant_dtype(node, a.dtype, "a", EIGHT_BIT)
        check_quant_dtype(node, b.dtype, "b", EIGHT_BIT)
        check_quant_dtype(node, y_zero.dtype, "y_zero_point", EIGHT_BIT)
        for i in (1, 4, 6):
            if ins[i].dtype is not None and ins[i].dtype.kind != "f":
                raise self.fail(node, f"scale input {i} must be float, got {ins[i].dtype}")
        rows = None if a.shape is None or len(a.shape) < 2 else a.shape[-2]
        cols = None if b.shape is None or len(b.shape) < 2 else b.shape[-1]
        for i, what, length in ((1, "a_scale", rows), (2, "a_zero_point", rows), (4, "b_scale", cols),
                                (5, "b_zero_point", cols), (6, "y_scale", 1), (7, "y_zero_point", 1)):
            _per_tensor_or_axis(self, node, ins[i], what, length)
        return [Info(y_zero.dtype, matmul_shape(node, a.shape, b.shape))]


def _per_tensor_or_axis(proto: Prototype, node: Node, info: Info, what: str, length: int | None) -> None:
    """ShapeError unless a quantization parameter holds one element, or is 1-D with ``length`` values."""
    shape = info.shape
    if shape is None or any(d is None for d in shape) or int(np.prod(shape, dtype=np.int64)) == 1:
        return
    if len(shape) != 1 or (length is not None and shape[0] != length) or length == 1:
        want = "one element" if length == 1 else f"one element or {length if length is not None else 'one per row/column'}"
        raise proto.fail(node, f"{what} has shape {shape}; it must hold {want}")
