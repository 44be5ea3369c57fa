"""Upsample (deprecated by Resize): nearest or linear upsampling by per-axis scales."""
from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._nn import resize_targets
from nnhal.operator.base import REQUIRED, Info, Prototype


class Upsample(Prototype):
    op_type = "Upsample"
    versions = (1, 7, 9, 10)
    inputs = (1, 2)
    attributes = {"mode": "nearest"}

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version == 1:
            return {"mode": "nearest", "height_scale": REQUIRED, "width_scale": REQUIRED}
        if version == 7:
            return {"mode": "nearest", "scales": REQUIRED}
        return self.attributes

    def check(self, node: Node) -> None:
        if node.attrs["mode"] not in ("nearest", "linear", "bilinear"):
            raise ModelError(f"{where(node)}: mode '{node.attrs['mode']}' is not nearest or linear")
        if node.version >= 9 and len(node.inputs) < 2:
            raise ModelError(f"{where(node)}: Upsample-{node.version} takes the scales input")

    def scales(self, node: Node, rank: int, ins: list) -> np.ndarray | None:
        """The per-axis scales (constant) or None when only known at run time."""
        if node.version == 1:
            return np.array([1.0, 1.0, node.attrs["height_scale"], node.attrs["width_scale"]][-rank:])
        if node.version == 7:
            return np.asarray(node.attrs["scales"], dtype=np.float64)
        value = ins[1].value if isinstance(ins[1], Info) else ins[1]
        return None if value is None else np.asarray(value, dtype=np.float64)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is None:
            return [Info(x.dtype, None)]
        scales = self.scales(node, len(x.shape), ins)
        if scales is None:
            return [Info(x.dtype, (None,) * len(x.shape))]
        return [Info(x.dtype, tuple(resize_targets(node, x.shape, scales, None)["out"]))]
