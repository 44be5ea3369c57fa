"""Geometry of Conv and the pools in 2-D form: 1-D windows run as 2-D with a height of one."""
from __future__ import annotations

from dataclasses import dataclass

from nnhal.graph.node import Node
from nnhal.operator.spatial import output_sizes, resolve_pads


@dataclass(frozen=True)
class Window:
    h: int
    w: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    ph: int        # top pad
    pw: int        # left pad
    oh: int
    ow: int
    ph_end: int = 0
    pw_end: int = 0


def window(node: Node, x_shape: tuple[int, ...], kernel: list[int], ceil_mode: bool = False) -> Window:
    spatial = [int(d) for d in x_shape[2:]]
    n = len(spatial)
    strides = list(node.attrs.get("strides") or [1] * n)
    dilations = list(node.attrs.get("dilations") or [1] * n)
    pads = resolve_pads(node, spatial, kernel, strides, dilations, ceil_mode)
    out = output_sizes(node, spatial, kernel, strides, dilations, pads, ceil_mode)
    if n == 1:
        return Window(1, spatial[0], 1, kernel[0], 1, strides[0], 1, dilations[0], 0, pads[0], 1, out[0], 0, pads[1])
    return Window(spatial[0], spatial[1], kernel[0], kernel[1], strides[0], strides[1], dilations[0], dilations[1],
                  pads[0], pads[1], out[0], out[1], pads[2], pads[3])
