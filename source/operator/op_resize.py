"""Resize: nearest, (anti-aliased) N-linear and N-cubic resampling by scales or sizes."""
from __future__ import annotations

from typing import Any

from nnhal.errors import ModelError, UnsupportedError, where
from nnhal.graph.node import Node
from nnhal.operator._nn import resize_axes, resize_targets
from nnhal.operator.base import Info, Prototype

MODES = ("nearest", "linear", "cubic")
TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
              "tf_crop_and_resize", "tf_half_pixel_for_nn")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


class Resize(Prototype):
    op_type = "Resize"
    versions = (10, 11, 13, 18, 19)
    inputs = (2, 4)
    attributes = {"antialias": 0, "axes": None, "coordinate_transformation_mode": "half_pixel",
                  "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0,
                  "keep_aspect_ratio_policy": "stretch", "mode": "nearest", "nearest_mode": "round_prefer_floor"}

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version == 10:
            # NOTE: Resize-10 samples like Upsample: asymmetric coordinates, nearest rounds down.
            return {**self.attributes, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
        return self.attributes

    def check(self, node: Node) -> None:
        a = node.attrs
        if a["mode"] not in MODES:
            raise ModelError(f"{where(node)}: mode '{a['mode']}' is not one of {MODES}")
        if a["coordinate_transformation_mode"] not in TRANSFORMS:
            raise ModelError(f"{where(node)}: coordinate_transformation_mode "
                             f"'{a['coordinate_transformation_mode']}' is not one of {TRANSFORMS}")
        if a["nearest_mode"] not in NEAREST:
            raise ModelError(f"{where(node)}: nearest_mode '{a['nearest_mode']}' is not one of {NEAREST}")
        if node.version < 11 and len(node.inputs) > 2:
            raise ModelError(f"{where(node)}: Resize-10 takes 2 inputs")
        if node.version >= 11 and len(node.inputs) < 3 and node.version < 13:
            raise ModelError(f"{where(node)}: Resize-{node.version} needs X, roi and scales")

    def operands(self, node: Node, ins: list) -> tuple:
        """(roi, scales, sizes) of the node's inputs, by version (absent ones None)."""
        if node.version == 10:
            return None, ins[1], None
        pick = lambda i: ins[i] if len(ins) > i else None  # noqa: E731
        return pick(1), pick(2), pick(3)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        roi, scales, sizes = self.operands(node, ins)
        if x.shape is None:
            return [Info(x.dtype, None)]
        rank = len(x.shape)
        if node.attrs["coordinate_transformation_mode"] == "tf_half_pixel_for_nn" and node.version >= 13:
            raise UnsupportedError(f"{where(node)}: tf_half_pixel_for_nn was removed in Resize-13")
        given = [v for v in (scales, sizes) if v is not None and (v.shape is None or 0 not in v.shape)]
        if any(v.value is None for v in given) or (roi is not None and roi.value is None
                                                   and node.attrs["coordinate_transformation_mode"]
                                                   == "tf_crop_and_resize"):
            axes = resize_axes(node, rank)
            return [Info(x.dtype, tuple(None if a in axes else d for a, d in enumerate(x.shape)))]
        targets = resize_targets(node, x.shape, scales, sizes, roi)
        return [Info(x.dtype, tuple(targets["out"]))]
