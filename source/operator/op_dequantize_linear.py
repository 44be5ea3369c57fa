"""DequantizeLinear: y = (x - zero_point) * scale."""
from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._qrc import check_quant_dtype, check_quant_params, onnx_dtype
from nnhal.operator.base import Info, Prototype


class DequantizeLinear(Prototype):
    op_type = "DequantizeLinear"
    versions = (10, 13, 19, 21, 23, 24, 25, 28)
    inputs = (2, 3)

    def attributes_for(self, version: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        if version >= 13:
            attrs["axis"] = 1
        if version >= 21:
            attrs["block_size"] = 0
        if version >= 23:
            attrs["output_dtype"] = 0
        return attrs

    def check(self, node: Node) -> None:
        if node.attrs.get("block_size", 0) < 0:
            raise ModelError(f"{where(node)}: block_size must be >= 0, got {node.attrs['block_size']}")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, scale = ins[0], ins[1]
        zero = ins[2] if len(ins) > 2 else None
        check_quant_dtype(node, x.dtype, "x")
        if zero is not None and zero.dtype is not None and x.dtype is not None and zero.dtype != x.dtype:
            raise self.fail(node, f"zero point type {zero.dtype} differs from x type {x.dtype}")
        if scale.dtype is not None and scale.dtype.kind != "f":
            raise self.fail(node, f"scale must be a float tensor, got {scale.dtype}")
        code = node.attrs.get("output_dtype", 0)
        dtype = onnx_dtype(node, code, "output_dtype") if code else scale.dtype
        if dtype is not None and np.dtype(dtype).kind != "f":
            raise self.fail(node, f"output_dtype must be a float type, got {dtype}")
        check_quant_params(node, x, scale, zero, node.attrs.get("axis", 1), node.attrs.get("block_size", 0))
        return [Info(dtype, x.shape)]
