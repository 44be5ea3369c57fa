"""GridSample: sample X at normalized grid locations (nearest, linear or cubic)."""
from __future__ import annotations

from typing import Any

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._nn import require_float
from nnhal.operator.base import Info, Prototype

MODES = {16: ("bilinear", "nearest", "bicubic"), 20: ("linear", "nearest", "cubic")}


class GridSample(Prototype):
    op_type = "GridSample"
    versions = (16, 20, 22)
    inputs = (2, 2)
    attributes = {"align_corners": 0, "mode": "linear", "padding_mode": "zeros"}

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {**self.attributes, "mode": "bilinear"} if version == 16 else self.attributes

    def check(self, node: Node) -> None:
        modes = MODES[16 if node.version == 16 else 20]
        if node.attrs["mode"] not in modes:
            raise ModelError(f"{where(node)}: mode '{node.attrs['mode']}' is not one of {modes}")
        if node.attrs["padding_mode"] not in ("zeros", "border", "reflection"):
            raise ModelError(f"{where(node)}: padding_mode '{node.attrs['padding_mode']}' is not "
                             f"zeros, border or reflection")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, grid = ins
        require_float(self, node, x)
        if x.shape is None or grid.shape is None:
            return [Info(x.dtype, None)]
        r = len(x.shape) - 2
        if len(grid.shape) != r + 2 or (grid.shape[-1] is not None and grid.shape[-1] != r):
            raise self.fail(node, f"grid shape {grid.shape} does not match input rank {len(x.shape)}")
        if node.version == 16 and r != 2:
            raise self.fail(node, "GridSample-16 takes 4-D input")
        return [Info(x.dtype, (x.shape[0], x.shape[1], *grid.shape[1:-1]))]
