"""Clip: y = min(max(x, min), max); bounds are attributes before opset 11, optional inputs after."""
from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._unary import NUMERIC, check_kind
from nnhal.operator.base import Info, Prototype, same_as

_FLT_MAX = float(np.finfo(np.float32).max)


class Clip(Prototype):
    op_type = "Clip"
    versions = (1, 6, 11, 12, 13)
    inputs = (1, 3)

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version < 6:
            return {"min": None, "max": None}
        if version < 11:
            return {"min": -_FLT_MAX, "max": _FLT_MAX}
        return {}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        check_kind(self, node, x, NUMERIC)
        for name, bound in zip(("min", "max"), ins[1:]):
            if bound is None:
                continue
            if node.version < 11:
                raise self.fail(node, "takes its bounds as attributes before opset 11, not as inputs")
            if x.dtype is not None and bound.dtype is not None and bound.dtype != x.dtype:
                raise self.fail(node, f"{name} has dtype {bound.dtype}; the input has {x.dtype}")
            if bound.static and int(np.prod(bound.shape)) != 1:
                raise self.fail(node, f"{name} must be a scalar, got shape {bound.shape}")
        return [same_as(x)]
