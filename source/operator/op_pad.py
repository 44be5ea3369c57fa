"""Pad: pad (or, with negative pads, crop) a tensor; constant, reflect, edge or wrap mode."""
from __future__ import annotations

from typing import Any

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._shape import const_ints, norm_axes, present
from nnhal.operator.base import REQUIRED, Info, Prototype


def pad_widths(node: Node, rank: int, pads: list[int], axes: list[int] | None) -> list[tuple[int, int]]:
    """(begin, end) per axis of the input; ValueError when pads and axes disagree."""
    axes = list(range(rank)) if axes is None else norm_axes(node, axes, rank)
    if len(pads) != 2 * len(axes):
        raise ValueError(f"pads has {len(pads)} values for {len(axes)} axes")
    widths = [(0, 0)] * rank
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + len(axes)])
    return widths


def static_pads(node: Node) -> list[int]:
    """Pads given as an attribute (opset 1: ``paddings``; opset 2: ``pads``)."""
    return list(node.attrs["paddings"] if node.version < 2 else node.attrs["pads"])


class Pad(Prototype):
    op_type = "Pad"
    versions = (1, 2, 11, 13, 18, 19, 21, 23, 24, 25)
    inputs = (1, 4)

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version < 2:
            return {"mode": "constant", "paddings": REQUIRED, "value": 0.0}
        if version < 11:
            return {"mode": "constant", "pads": REQUIRED, "value": 0.0}
        return {"mode": "constant"}

    def check(self, node: Node) -> None:
        modes = ("constant", "reflect", "edge", "wrap") if node.version >= 19 else ("constant", "reflect", "edge")
        if node.attrs["mode"] not in modes:
            raise ModelError(f"{where(node)}: mode '{node.attrs['mode']}' is not one of {modes}")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is None:
            return [Info(x.dtype, None)]
        rank = len(x.shape)
        if node.version < 11:
            pads, axes = static_pads(node), None
        else:
            if present(ins, 1) is None:
                raise self.fail(node, "the pads input is missing")
            pads, axes = const_ints(ins[1]), const_ints(present(ins, 3))
            if pads is None or (present(ins, 3) is not None and axes is None):
                return [Info(x.dtype, (None,) * rank)]
        try:
            widths = pad_widths(node, rank, pads, axes)
        except ValueError as exc:
            raise self.fail(node, str(exc)) from exc
        dims = tuple(None if d is None else d + b + e for d, (b, e) in zip(x.shape, widths))
        if any(d is not None and d < 0 for d in dims):
            raise self.fail(node, f"pads {pads} crop more than the input shape {x.shape}")
        return [Info(x.dtype, dims)]
