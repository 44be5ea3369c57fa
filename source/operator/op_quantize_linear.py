"""QuantizeLinear: y = saturate(round_half_even(x / scale) + zero_point)."""
from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._qrc import check_quant_dtype, check_quant_params, onnx_dtype
from nnhal.operator.base import Info, Prototype


class QuantizeLinear(Prototype):
    op_type = "QuantizeLinear"
    versions = (10, 13, 19, 21, 23, 24, 25, 28)
    inputs = (2, 3)

    def attributes_for(self, version: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        if version >= 13:
            attrs["axis"] = 1
        if version >= 19:
            attrs["saturate"] = 1
        if version >= 21:
            attrs["block_size"] = 0
            attrs["output_dtype"] = 0
        if version >= 23:
            attrs["precision"] = 0
        return attrs

    def check(self, node: Node) -> None:
        if node.attrs.get("block_size", 0) < 0:
            raise ModelError(f"{where(node)}: block_size must be >= 0, got {node.attrs['block_size']}")

    def output_dtype(self, node: Node, zero: Info | None) -> np.dtype:
        code = node.attrs.get("output_dtype", 0)
        wanted = onnx_dtype(node, code, "output_dtype") if code else None
        if zero is not None and zero.dtype is not None:
            if wanted is not None and wanted != zero.dtype:
                raise self.fail(node, f"output_dtype {wanted} differs from the zero point type {zero.dtype}")
            return zero.dtype
        return wanted if wanted is not None else np.dtype(np.uint8)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, scale = ins[0], ins[1]
        zero = ins[2] if len(ins) > 2 else None
        dtype = self.output_dtype(node, zero)
        check_quant_dtype(node, dtype, "the quantized output")
        if x.dtype is not None and x.dtype.kind not in "fi":
            raise self.fail(node, f"x must be float or int32, got {x.dtype}")
        if node.attrs.get("precision", 0):
            onnx_dtype(node, node.attrs["precision"], "precision")
        check_quant_params(node, x, scale, zero, node.attrs.get("axis", 1), node.attrs.get("block_size", 0))
        return [Info(dtype, x.shape)]
