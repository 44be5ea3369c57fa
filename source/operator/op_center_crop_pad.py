"""CenterCropPad: center-crop or zero-pad the given axes to a target shape."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._shape import const_ints, norm_axes
from nnhal.operator.base import Info, Prototype


def crop_axes(node: Node, rank: int, count: int) -> list[int]:
    """The axes the shape input addresses; ValueError when they disagree with it."""
    axes = node.attrs["axes"]
    axes = list(range(rank)) if axes is None else norm_axes(node, list(axes), rank)
    if len(axes) != count:
        raise ValueError(f"shape has {count} values for {len(axes)} axes")
    return axes


class CenterCropPad(Prototype):
    op_type = "CenterCropPad"
    versions = (18,)
    inputs = (2, 2)
    attributes = {"axes": None}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, shape_info = ins
        if x.shape is None:
            return [Info(x.dtype, None)]
        shape = const_ints(shape_info)
        dims = list(x.shape)
        try:
            if shape is None:
                axes = list(range(len(dims))) if node.attrs["axes"] is None else \
                    norm_axes(node, list(node.attrs["axes"]), len(dims))
                for a in axes:
                    dims[a] = None
            else:
                for a, s in zip(crop_axes(node, len(dims), len(shape)), shape):
                    dims[a] = s
        except ValueError as exc:
            raise self.fail(node, str(exc)) from exc
        return [Info(x.dtype, tuple(dims))]
