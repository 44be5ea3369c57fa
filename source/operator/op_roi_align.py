"""RoiAlign: average or max of bilinear samples in each bin of each region of interest."""
from __future__ import annotations

from typing import Any

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._nn import require_float
from nnhal.operator.base import Info, Prototype


class RoiAlign(Prototype):
    op_type = "RoiAlign"
    versions = (10, 16, 22)
    inputs = (3, 3)
    attributes = {"coordinate_transformation_mode": "half_pixel", "mode": "avg", "output_height": 1,
                  "output_width": 1, "sampling_ratio": 0, "spatial_scale": 1.0}

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version == 10:
            # NOTE: RoiAlign-10 had no half-pixel offset, which later versions call output_half_pixel.
            return {**self.attributes, "coordinate_transformation_mode": "output_half_pixel"}
        return self.attributes

    def check(self, node: Node) -> None:
        if node.attrs["mode"] not in ("avg", "max"):
            raise ModelError(f"{where(node)}: mode '{node.attrs['mode']}' is not avg or max")
        if node.attrs["coordinate_transformation_mode"] not in ("half_pixel", "output_half_pixel"):
            raise ModelError(f"{where(node)}: coordinate_transformation_mode must be half_pixel or output_half_pixel")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, rois, _ = ins
        require_float(self, node, x)
        if x.shape is not None and len(x.shape) != 4:
            raise self.fail(node, f"input rank {len(x.shape)} is not 4")
        n = None if rois.shape is None else rois.shape[0]
        c = None if x.shape is None else x.shape[1]
        return [Info(x.dtype, (n, c, node.attrs["output_height"], node.attrs["output_width"]))]
